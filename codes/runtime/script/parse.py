"""Script files into the script model: text scripts and JSONL here, SRT and WebVTT in subtitles.py.

Each parser is a pure function from the file's text (or bytes) and the declared speakers' names to a
Script; read_script adds the file and picks the parser by extension (or --script_format).

A text script (docs/scripts.md):
    Alice: Hello there. <break time="500ms"/> Are you ready?
    Bob: I am. [laughter]
    This line is still Bob's; a colon after a word that is no declared speaker: just text.
A line beginning with a declared speaker's name and a colon switches to that speaker; any other line
continues the current one (before the first switch, the default speaker). A turn is one segment,
cut at each <break time="500ms"/> (or time="1.5s"), which is exact silence. Upstream's [laughter]-style
tags, CMU phones and pinyin pass through unchanged: square brackets are the model's, angle brackets ours.

JSONL: one object per line, {"text", "speaker"?, "language"?, "instruct"?, "speed"?, "duration"?, "start"?},
or {"break": seconds}. With "start" on every segment (and "duration" with it) it is a timed script, as
subtitles are.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from codes.common.errors import UserError
from codes.common.fileio import read_bounded
from codes.runtime.script.segments import Break, Script, Segment, check_break, pace_warning
from codes.runtime.script.subtitles import parse_srt, parse_vtt, settle_cues
from codes.runtime.script.text_input import SpeakerNames, decode

FORMATS = ("text", "srt", "vtt", "jsonl")
SUFFIXES = {".srt": "srt", ".vtt": "vtt", ".jsonl": "jsonl", ".ndjson": "jsonl"}
MAX_SCRIPT_BYTES = 64 << 20  # far past any script; a bigger file is a wrong path
_ANY_BREAK = re.compile(r"<\s*break\b[^>]*>", re.I)
_BREAK = re.compile(r"<\s*break\s+time\s*=\s*([\"'])\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s)\s*\1\s*/?\s*>", re.I)
SEGMENT_KEYS = {"text": str, "speaker": str, "language": str, "instruct": str, "speed": float, "duration": float,
                "start": float}


def format_for(path: str | Path, script_format: str | None = None) -> str:
    """The parser for a file: the one asked for, else by extension (anything not listed is a text script)."""
    if script_format is not None:
        if script_format not in FORMATS:
            raise UserError(f"script format must be one of {', '.join(FORMATS)}, got {script_format!r}")
        return script_format
    return SUFFIXES.get(Path(path).suffix.lower(), "text")


def parse_script(data: bytes | str, script_format: str, speakers=(), overlap: str = "error",
                 source: str = "script") -> Script:
    """A script's text (or bytes) in `script_format` -> Script. `speakers`: the declared names; `overlap`:
    what overlapping cues do (subtitles.OVERLAPS)."""
    parsers = {"text": parse_text, "jsonl": parse_jsonl, "srt": parse_srt, "vtt": parse_vtt}
    if script_format not in parsers:
        raise UserError(f"script format must be one of {', '.join(FORMATS)}, got {script_format!r}")
    return parsers[script_format](data, speakers, overlap, source)


def read_script(path: str | Path, script_format: str | None = None, speakers=(), overlap: str = "error") -> Script:
    path = Path(path)
    data = read_bounded(path, MAX_SCRIPT_BYTES, "script")
    return parse_script(data, format_for(path, script_format), speakers, overlap, str(path))


def break_seconds(tag: str, where: str) -> float:
    """<break time="500ms"/> or time="1.5s" -> seconds, checked against the limit."""
    match = _BREAK.fullmatch(tag)
    if not match:
        raise UserError(f'{where}: malformed break {tag!r}; write <break time="500ms"/> or <break time="1.5s"/>')
    value, unit = float(match.group(2)), match.group(3).lower()
    return check_break(value / 1000 if unit == "ms" else value, where)


def parse_text(data: bytes | str, speakers=(), overlap: str = "error", source: str = "script") -> Script:
    names = SpeakerNames(speakers)
    items: list[Segment | Break] = []
    warnings: list[str] = []
    speaker, words, began = None, [], ""

    def add_words(text: str, where: str):
        nonlocal began
        if text.strip():
            if not words:
                began = where
            words.append(text.strip())

    def close_turn():
        if words:
            items.append(Segment(" ".join(words), speaker, where=began))
            words.clear()

    for number, line in enumerate(decode(data, source).split("\n"), 1):
        line = line.strip()
        if not line:
            continue
        where = f"line {number}"
        prefixed = names.prefix(line)
        if prefixed:
            close_turn()
            speaker, line = prefixed
        elif (stray := names.stray_prefix(line)) is not None:
            warnings.append(f"{source} {where} begins with {stray!r} and a colon, which is no declared speaker; "
                            "it is spoken as text")
        last = 0
        for tag in _ANY_BREAK.finditer(line):
            add_words(line[last:tag.start()], where)
            close_turn()
            items.append(Break(break_seconds(tag.group(), f"{source} {where}"), where))
            last = tag.end()
        add_words(line[last:], where)
    close_turn()
    if not any(isinstance(item, Segment) for item in items):
        raise UserError(f"{source} holds no text to speak")
    return Script(tuple(items), timed=False, source=source, warnings=tuple(warnings))


def _jsonl_value(key: str, value, where: str):
    kind = SEGMENT_KEYS[key]
    if value is None:
        return None
    if kind is float:
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise UserError(f'{where}: "{key}" must be a number, got {json.dumps(value)}')
        if key == "start" and not value >= 0 or key != "start" and not value > 0:
            raise UserError(f'{where}: "{key}" must be {">= 0" if key == "start" else "> 0"}, got {value}')
        return float(value)
    if not isinstance(value, str):
        raise UserError(f'{where}: "{key}" must be a string, got {json.dumps(value)}')
    return value


def parse_jsonl(data: bytes | str, speakers=(), overlap: str = "error", source: str = "script.jsonl") -> Script:
    names = SpeakerNames(speakers)
    items: list[Segment | Break] = []
    for number, line in enumerate(decode(data, source).split("\n"), 1):
        if not line.strip():
            continue
        where = f"{source} line {number}"
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise UserError(f"{where} is not valid JSON ({exc.msg}); write one object per line") from None
        if not isinstance(record, dict):
            raise UserError(f'{where} is not a JSON object; write {{"text": ..., "speaker": ...}} or {{"break": 0.5}}')
        if "break" in record:
            if set(record) != {"break"}:
                raise UserError(f'{where}: a break line holds "break" alone; put the text on its own line')
            items.append(Break(check_break(record["break"], where), f"line {number}"))
            continue
        unknown = sorted(set(record) - set(SEGMENT_KEYS))
        if unknown:
            raise UserError(f"{where} has unknown key(s) {', '.join(unknown)}; "
                            f"allowed: {', '.join(SEGMENT_KEYS)}, or break alone")
        fields = {key: _jsonl_value(key, value, where) for key, value in record.items()}
        text = fields.pop("text", None)
        if not text or not text.strip():
            raise UserError(f'{where} needs a "text" with words in it')
        if _ANY_BREAK.search(text):
            raise UserError(f'{where}: a pause in JSONL is its own line, {{"break": 0.5}}, not a <break> tag')
        if fields.get("speaker") is not None:
            fields["speaker"] = names.declared(fields["speaker"], where)
        items.append(Segment(text.strip(), where=f"line {number}", **fields))
    segments = [item for item in items if isinstance(item, Segment)]
    if not segments:
        raise UserError(f"{source} holds no text to speak")
    timed = [s for s in segments if s.start is not None]
    if not timed:
        warnings = [w for w in (pace_warning(s, source) for s in segments) if w]
        return Script(tuple(items), timed=False, source=source, warnings=tuple(warnings))
    for item in items:
        if isinstance(item, Break):
            raise UserError(f"{source} {item.where}: a timed script (with \"start\") has no breaks; its times "
                            "place the silence")
        if item.start is None or item.duration is None:
            raise UserError(f'{source} {item.where}: in a timed script every segment needs "start" and "duration"')
    segments = settle_cues(segments, overlap, source)
    warnings = [w for w in (pace_warning(s, source) for s in segments) if w]
    return Script(tuple(segments), timed=True, source=source, warnings=tuple(warnings))
