"""What inference.py is asked to do: utterances from --text, --text_file or --jsonl, and where each goes.

Every line is checked before the first is spoken; output paths are checked and
written by codes/runtime/audio/outputs.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from codes.common.errors import UserError

# Ours, and upstream's test-list keys (omnivoice-infer-batch): id names the file, language_id is language,
# language_name is for upstream's reports only.
JOB_KEYS = {"text", "output", "language", "instruct", "duration", "speed",
            "id", "language_id", "language_name", "ref_audio", "ref_text"}
NUMBER_KEYS = {"duration", "speed"}


@dataclass
class Utterance:
    """One line of speech to make, and the file it goes to."""

    text: str
    output: Path
    language: str | None = None
    instruct: str | None = None
    duration: float | None = None
    speed: float | None = None
    ref_audio: Path | None = None  # this line's own clip to clone (with ref_text, if any), over --ref_audio/--voice
    ref_text: str | None = None


def _read_lines(path: Path) -> list[str]:
    try:
        return path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"cannot read {path} ({type(exc).__name__}); pass a UTF-8 text file") from None


def output_folder(output: Path, flag: str = "--output") -> Path:
    """The folder a batch writes into, created if missing."""
    if output.suffix.lower() in (".wav", ".npy"):
        raise UserError(f"{flag} {output} looks like a file; with --text_file/--jsonl pass a folder")
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot create folder {output} for {flag} ({exc.strerror}); choose another {flag}") from None
    return output


def jobs_from_text_file(path: Path, output: Path) -> list[Utterance]:
    texts = [line.strip() for line in _read_lines(path)]
    texts = [t for t in texts if t]
    if not texts:
        raise UserError(f"{path} holds no text; put one utterance per line")
    folder = output_folder(output)
    return [Utterance(text, folder / f"{i:04d}.wav") for i, text in enumerate(texts, 1)]


def _wrong_type(key: str, value) -> str | None:
    """What a job value should have been, or None when it is fine (null means "not given")."""
    if value is None:
        return None
    if key in NUMBER_KEYS:
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if is_number else "a number"
    return None if isinstance(value, str) else "a string"


def jobs_from_jsonl(path: Path, output: Path) -> list[Utterance]:
    """One JSON object per line: {"text", "output"?: "name.wav", "language"?, "instruct"?, "duration"?, "speed"?},
    or upstream's test-list line {"id", "text", "ref_audio"?, "ref_text"?, "language_id"?, ...}. A clip's path is
    relative to the file's folder."""
    records = []
    for number, line in enumerate(_read_lines(path), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise UserError(f"{path} line {number} is not valid JSON ({exc.msg}); write one object per line") from None
        if not isinstance(record, dict) or not isinstance(record.get("text"), str):
            raise UserError(f'{path} line {number} needs an object with a "text" string')
        unknown = sorted(set(record) - JOB_KEYS)
        if unknown:
            raise UserError(f"{path} line {number} has unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(JOB_KEYS))}")
        for key, value in record.items():
            wanted = _wrong_type(key, value)
            if wanted:
                raise UserError(f'{path} line {number}: "{key}" must be {wanted}, got {json.dumps(value)}')
        records.append((number, record))
    if not records:
        raise UserError(f"{path} holds no utterances; write one JSON object per line")
    utterances = [_utterance(path, number, record, output, i) for i, (number, record) in enumerate(records, 1)]
    output_folder(output)  # made only once every line is good
    return utterances


def _utterance(path: Path, number: int, record: dict, folder: Path, index: int) -> Utterance:
    where = f"{path} line {number}"
    language, language_id = record.pop("language", None), record.pop("language_id", None)
    if language and language_id and language != language_id:
        raise UserError(f'{where}: "language" and "language_id" differ; they are one setting, give one')
    record.pop("language_name", None)
    row_id = record.pop("id", None)
    name = record.pop("output", None) or (f"{row_id}.wav" if row_id else f"{index:04d}.wav")
    if Path(name).name != name or name.startswith(".") or name in ("", ".."):
        raise UserError(f"{where}: output name {name!r} is not a plain file name; the files go into --output")
    if record.get("ref_audio"):  # without "ref_text", the build's recogniser transcribes it
        record["ref_audio"] = path.parent / record["ref_audio"]
    elif record.get("ref_text"):
        raise UserError(f'{where}: "ref_text" needs "ref_audio", the clip it transcribes')
    return Utterance(output=folder / name, language=language or language_id, **record)
