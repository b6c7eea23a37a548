"""SRT and WebVTT: cues read into segments, and captions written back.

Read as editors write them (docs/scripts.md): a BOM, CRLF, missing cue numbers, "." for ","; VTT's
header, NOTE, STYLE and REGION blocks, cue identifiers and settings; styling stripped (<i>, <b>, <u>,
<font>, VTT's <c>, <ruby>, <lang> and inline timestamps, ASS's {\\an8}), HTML entities unescaped. The
speaker comes from a VTT voice span (<v Name>, its closing tag optional), else from a declared "Name:" or
">> Name:" at the start of the cue, else it is the default one. A small parser of our own: pysubs2's
SubRip reader, which its WebVTT one shares, drops unknown tags, <v Name> among them (kept, they are raw
text), and keeps none of the line numbers errors need.

Times are kept in whole milliseconds while read, so a cue's length is the decimal its file says
(00:00:03,040 - 00:00:01,000 is 2.04 s, what --duration 2.04 gives).
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass, replace

from codes.common.errors import UserError
from codes.runtime.script.segments import Script, Segment, pace_warning
from codes.runtime.script.text_input import SpeakerNames, decode

OVERLAPS = ("error", "trim", "mix")
_TIMESTAMP = re.compile(r"(?:(\d+):)?(\d{1,2}):(\d{2})[,.](\d{1,3})")
_TIMING = re.compile(r"\s*(?P<start>\S+)\s*-->\s*(?P<end>\S+)(?P<settings>.*)")
_VOICE = re.compile(r"<v(?:\.[^\s>]*)?\s+(?P<name>[^>]+)>")
_TAG = re.compile(r"<[^>]*>")
_ASS_OVERRIDE = re.compile(r"\{\\[^}]*\}")
_DIALOGUE_DASH = re.compile(r"^\s*-\s+")
_VTT_SKIPPED = ("NOTE", "STYLE", "REGION")


@dataclass(frozen=True)
class Cue:
    """One cue as read: times in milliseconds, its text lines untouched, and where it is."""

    number: int  # 1-based, in the file's order (cue numbers in files may be missing or wrong)
    line: int
    start_ms: int
    end_ms: int
    lines: tuple[str, ...]

    @property
    def where(self) -> str:
        return f"cue {self.number} (line {self.line})"


def parse_timestamp(text: str, where: str) -> int:
    """HH:MM:SS,mmm (hours optional, "." or "," before 1 to 3 digits of fraction) -> milliseconds."""
    match = _TIMESTAMP.fullmatch(text.strip())
    if not match or int(match.group(2)) >= 60 or int(match.group(3)) >= 60:
        raise UserError(f"{where}: malformed timestamp {text.strip()!r}; write HH:MM:SS,mmm (e.g. 00:01:02,500)")
    hours, minutes, seconds, fraction = match.groups()
    millis = int(fraction.ljust(3, "0"))
    return ((int(hours or 0) * 60 + int(minutes)) * 60 + int(seconds)) * 1000 + millis


def format_timestamp(millis: int, separator: str) -> str:
    """Milliseconds -> HH:MM:SS,mmm (SRT, separator ",") or HH:MM:SS.mmm (VTT, ".")."""
    seconds, millis = divmod(millis, 1000)
    minutes, seconds = divmod(seconds, 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours:02d}:{minutes:02d}:{seconds:02d}{separator}{millis:03d}"


def _blocks(text: str) -> list[tuple[int, list[str]]]:
    """Blank-line separated blocks: (first line's number, its lines)."""
    blocks, current, first = [], [], 0
    for number, line in enumerate(text.split("\n"), 1):
        if line.strip():
            if not current:
                first = number
            current.append(line)
        elif current:
            blocks.append((first, current))
            current = []
    if current:
        blocks.append((first, current))
    return blocks


def _cue(number: int, first_line: int, lines: list[str], source: str, vtt: bool) -> Cue:
    """A block's cue: an optional number or identifier line, the timing line, then its text."""
    timing_at = 0 if "-->" in lines[0] else 1
    where = f"{source} cue {number} (line {first_line})"
    if timing_at >= len(lines) or "-->" not in lines[timing_at]:
        raise UserError(f"{where}: no timing line; a cue needs `00:00:01,000 --> 00:00:02,000` "
                        "(after its number, if any)")
    if timing_at == 1 and not vtt and not lines[0].strip().isdigit():
        raise UserError(f"{where}: expected a cue number or a timing line, got {lines[0].strip()!r}")
    timing_line = first_line + timing_at
    timing = _TIMING.fullmatch(lines[timing_at])
    where = f"{source} cue {number} (line {timing_line})"
    if not timing:
        raise UserError(f"{where}: malformed timing line {lines[timing_at].strip()!r}; write START --> END")
    start, end = parse_timestamp(timing.group("start"), where), parse_timestamp(timing.group("end"), where)
    if end <= start:
        raise UserError(f"{where}: the cue ends ({timing.group('end')}) at or before it starts "
                        f"({timing.group('start')}); a cue needs a length > 0")
    return Cue(number, timing_line, start, end, tuple(lines[timing_at + 1:]))


def read_srt(text: str, source: str) -> list[Cue]:
    return [_cue(number, first, lines, source, vtt=False) for number, (first, lines) in enumerate(_blocks(text), 1)]


def read_vtt(text: str, source: str) -> list[Cue]:
    blocks = _blocks(text)
    if not blocks or not re.fullmatch(r"WEBVTT(?:[ \t].*)?", blocks[0][1][0]):
        raise UserError(f"{source} is not a WebVTT file: its first line is not WEBVTT; give an .srt or pass "
                        "--script_format")
    cues = []
    for first, lines in blocks[1:]:  # the header block (WEBVTT and its metadata) is no cue
        if lines[0].split(None, 1)[0] in _VTT_SKIPPED and "-->" not in lines[0]:
            continue
        cues.append(_cue(len(cues) + 1, first, lines, source, vtt=True))
    return cues


def cue_segment(cue: Cue, names: SpeakerNames, source: str) -> Segment | None:
    """The cue's segment: speaker and plain text (None where nothing is left to speak)."""
    where = f"{source} {cue.where}"
    voices = {names.declared(m.group("name"), where) for line in cue.lines for m in _VOICE.finditer(line)}
    lines = []
    for line in cue.lines:
        line = html.unescape(_TAG.sub("", _ASS_OVERRIDE.sub("", line))).replace("\u00a0", " ").strip()
        prefixed = names.prefix(line)
        if prefixed:
            voices.add(prefixed[0])
            line = prefixed[1]
        line = _DIALOGUE_DASH.sub("", line)
        if line:
            lines.append(line)
    if len(voices) > 1:
        raise UserError(f"{where}: one cue holds several speakers ({', '.join(sorted(voices))}); "
                        "give each its own cue")
    text = " ".join(lines)
    if not text:
        return None
    return Segment(text, next(iter(voices), None), duration=(cue.end_ms - cue.start_ms) / 1000,
                   start=cue.start_ms / 1000, where=cue.where)


def settle_cues(segments: list[Segment], overlap: str, source: str) -> list[Segment]:
    """Cues in time order, an overlap refused (naming both cues) or settled as `overlap` says:
    "trim" ends the earlier cue where the later starts; "mix" keeps both, their speech summed."""
    if overlap not in OVERLAPS:
        raise UserError(f"overlap must be one of {', '.join(OVERLAPS)}, got {overlap!r}")
    ordered = sorted(segments, key=lambda s: s.start)
    settled = []
    for index, segment in enumerate(ordered):
        following = ordered[index + 1] if index + 1 < len(ordered) else None
        # The decimal sum the file means: as floats 0.1 + 0.2 is 0.30000000000000004, past a cue that starts at 0.3.
        end = round(segment.start + segment.duration, 6)
        if following is not None and following.start < end and overlap != "mix":
            if overlap == "error" or following.start <= segment.start:
                fixes = "--overlap mix" if overlap == "trim" else "--overlap trim|mix"
                raise UserError(f"{source}: {following.where} starts at {following.start:g} s, before "
                                f"{segment.where} ends at {end:g} s; fix the times or pass {fixes}")
            # Milliseconds, as read: the trimmed length is the decimal the two times give.
            segment = replace(segment, duration=round(following.start * 1000 - segment.start * 1000) / 1000)
        settled.append(segment)
    return settled


def subtitle_script(cues: list[Cue], names: SpeakerNames, source: str, overlap: str = "error") -> Script:
    segments, warnings = [], []
    for cue in cues:
        segment = cue_segment(cue, names, source)
        if segment is None:
            warnings.append(f"{source} {cue.where}: no text to speak; its slot stays silent")
        else:
            segments.append(segment)
    if not segments:
        raise UserError(f"{source} holds no cue with text to speak")
    segments = settle_cues(segments, overlap, source)
    warnings += [w for w in (pace_warning(s, source) for s in segments) if w]
    return Script(tuple(segments), timed=True, source=source, warnings=tuple(warnings))


def parse_srt(data: bytes | str, speakers=(), overlap: str = "error", source: str = "script.srt") -> Script:
    return subtitle_script(read_srt(decode(data, source), source), SpeakerNames(speakers), source, overlap)


def parse_vtt(data: bytes | str, speakers=(), overlap: str = "error", source: str = "script.vtt") -> Script:
    return subtitle_script(read_vtt(decode(data, source), source), SpeakerNames(speakers), source, overlap)


# --- captions out ------------------------------------------------------------------------------


def caption_text(captions, kind: str, sample_rate: int) -> str:
    """Captions as an SRT ("srt") or WebVTT ("vtt") file, at the sample offsets the captions hold
    (codes/runtime/script/timeline.py Caption), rounded to the millisecond.

    Segment level (Caption.words None, or () where nothing was aligned): one cue per caption, its speech; VTT
    names the speaker in a voice span. Word level (words from align_captions):
      - SRT: one cue per word, its start to its end, its text the word alone (no speaker), as openai-whisper's
        SRT writer gives with word_timestamps and max_words_per_line=1; read back as a script, each word is
        spoken in its slot. A cue needs a length, so a word of none (DTW may put several tokens on one frame)
        joins the cue before it (the first: the one after), and a caption whose words span no time at all is
        its segment's cue;
      - VTT: one cue per caption in its voice span, a timestamp tag before each word (W3C WebVTT's karaoke
        timing: `<00:00:01.250>word`), each tag after the cue's start, after the tag before it and before the
        cue's end, as the spec asks (the first word, at the cue's start, needs none)."""
    if kind not in ("srt", "vtt"):
        raise UserError(f"captions are .srt or .vtt, got {kind!r}")
    separator = "," if kind == "srt" else "."

    def millis(samples: int) -> int:
        return round(samples * 1000 / sample_rate)

    cues: list[tuple[int, int, str]] = []
    for caption in captions:
        start, end = millis(caption.start), millis(caption.end)
        words = [(w["word"], millis(w["start"]), millis(w["end"])) for w in caption.words or ()]
        if kind == "srt":
            cues += _word_cues(words) or [(start, end, caption.text)]
        else:
            text = _karaoke(words, start, end, separator) if words else _vtt_escape(caption.text)
            cues.append((start, end, f"<v {caption.speaker}>{text}"))
    blocks = ["WEBVTT\n"] if kind == "vtt" else []
    for number, (start, end, text) in enumerate(cues, 1):
        blocks.append(f"{number}\n{format_timestamp(start, separator)} --> {format_timestamp(end, separator)}\n{text}\n")
    return "\n".join(blocks)


# Scripts written without spaces between words (Thai, Lao, Myanmar, CJK punctuation, kana, Han, fullwidth forms):
# openai-whisper splits them by character, and their characters join without a space again.
_UNSPACED = re.compile("[\u0e00-\u0eff\u1000-\u109f\u3000-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
                       "\uff00-\uffef\U00020000-\U0003ffff]")


def word_separator(before: str, after: str) -> str:
    """What goes between two words as a caption shows them: nothing between two characters of a script
    written without spaces, else a space."""
    return "" if _UNSPACED.fullmatch(before[-1:]) and _UNSPACED.fullmatch(after[:1]) else " "


def _word_cues(words: list[tuple[str, int, int]]) -> list[tuple[int, int, str]]:
    """SRT's cues for a caption's words (word, start ms, end ms); [] where no word has a length."""
    cues: list[list] = []
    for word, start, end in words:
        if cues and (end <= start or cues[-1][1] <= cues[-1][0]):  # no length of its own, or the cue before none
            cues[-1][1], cues[-1][2] = max(cues[-1][1], end), cues[-1][2] + word_separator(cues[-1][2], word) + word
        else:
            cues.append([start, end, word])
    return [(start, end, text) for start, end, text in cues if end > start]


def _karaoke(words: list[tuple[str, int, int]], start: int, end: int, separator: str) -> str:
    """A VTT cue's words, each after a timestamp tag where the spec allows one."""
    text, last, previous = "", start, ""
    for word, word_start, _ in words:
        if text:
            text += word_separator(previous, word)
        if last < word_start < end:
            text += f"<{format_timestamp(word_start, separator)}>"
            last = word_start
        text += _vtt_escape(word)
        previous = word
    return text


def _vtt_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
