"""One corpus row, checked: a bad row becomes that row's error message and never stops the run.

A row is {"id", "text", "language"?, "instruct"?, "voice"?, "ref_audio"?, "ref_text"?, "duration"?,
"speed"?, "seed"?}; upstream's test lists (omnivoice-infer-batch) spell the language "language_id" and may
carry "language_name", which only its reports read. The id names the audio file, so it must be a safe file name. Checks that need
the model (language, instruct, reading the voice files) happen in the actor, where the row is spoken.
"""

from __future__ import annotations

import hashlib
import json
import math
import os

import pyarrow as pa

from codes.common import journal
from codes.runtime.text.duration import estimate_target_tokens, frames_for_duration

ROW_KEYS = ("id", "text", "language", "language_id", "language_name", "instruct", "voice", "ref_audio", "ref_text",
            "duration", "speed", "seed")
OPTIONAL_STRINGS = ("language", "language_id", "language_name", "instruct", "voice", "ref_audio", "ref_text")
MAX_ID_BYTES = 200  # the id plus extension and atomic_path's temporary name stay under NAME_MAX (255)
MAX_SEED = 2**63  # seeds live in int64 columns

# What the read stage hands the driver: every input line or row, in input order.
CHECKED_SCHEMA = pa.schema([
    ("source", pa.string()),  # the file a JSONL line came from (None for tables)
    ("blank", pa.bool_()),  # an empty JSONL line: counted for line numbers, not a row
    ("id", pa.string()),
    ("request", pa.string()),  # the checked row as JSON, what the actor speaks
    ("frames", pa.int64()),  # estimated length, to group rows of similar length
    ("error", pa.string()),
    ("warning", pa.string()),
])


class RowError(Exception):
    """What is wrong with one row, in one line."""


def _shown(value, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + "..."


def check_id(value) -> str:
    """The row's id as a file name under OUT_DIR/audio/, or RowError: it must never reach outside it."""
    if value is None:
        raise RowError('the row has no "id"; give each row a unique id (it names the audio file)')
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str):
        raise RowError(f'"id" must be a string, got {_shown(value)}')
    problem = None
    if not value:
        problem = "is empty"
    elif "/" in value or "\\" in value:
        problem = "holds a path separator"
    elif value.startswith("."):
        problem = 'starts with "." (hidden names are where audio is written before it is complete)'
    elif any(ord(c) < 32 or ord(c) == 127 for c in value):
        problem = "holds a control character"
    elif value != value.strip():
        problem = "starts or ends with whitespace"
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            problem = "is not valid Unicode"
        else:
            if size > MAX_ID_BYTES:
                problem = f"is {size} bytes long (at most {MAX_ID_BYTES})"
    if problem:
        raise RowError(f"id {_shown(value)} {problem}; ids name files in OUT_DIR/audio/, so use a plain file name")
    return value


def _number(row: dict, key: str, wanted: str, is_valid) -> float | None:
    given = value = row.get(key)
    if isinstance(value, str):  # CSV cells are text
        if not value.strip():
            return None
        try:
            value = float(value)
        except ValueError:
            value = None
    elif value is None or (isinstance(value, float) and math.isnan(value)):  # NaN: pandas' missing number
        return None
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not is_number or not math.isfinite(value) or not is_valid(value):
        raise RowError(f'"{key}" must be {wanted}, got {_shown(given)}')
    return float(value)


def row_seed(row_id: str, base_seed: int) -> int:
    """A stable seed from the id and --seed (not hash(): Python salts it per process)."""
    digest = hashlib.sha256(f"{base_seed}\0{row_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def _seed(row: dict, row_id: str, base_seed: int) -> int:
    value = row.get("seed")
    if isinstance(value, str) and not value.strip():
        value = None
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return row_seed(row_id, base_seed)
    if isinstance(value, str):
        try:
            value = int(value.strip())
        except ValueError:
            value = None
    elif isinstance(value, float) and value.is_integer():  # an int column with gaps, as pandas writes it
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_SEED:
        raise RowError(f'"seed" must be a whole number from 0 to 2**63-1, got {_shown(row.get("seed"))}')
    return value


def _resolve(path: str, base_dir: str | None) -> str:
    """Relative voice and reference paths are relative to the input's folder, so a corpus folder moves whole."""
    path = os.path.expanduser(path)
    if base_dir is None or os.path.isabs(path) or "://" in path:
        return path
    return os.path.normpath(os.path.join(base_dir, path))


def check_row(row, base_dir: str | None, base_seed: int, lang_id: str | None = None) -> tuple[str, dict, list[str]]:
    """(id, request, warnings) for one input row; RowError says what is wrong with it. lang_id (upstream's
    --lang_id) is every row's language, whatever the row says."""
    if not isinstance(row, dict):
        raise RowError(f"the row is not a JSON object, got {_shown(row)}; write one object per line")
    row_id = check_id(row.get("id"))
    warnings = []
    unknown = sorted(str(key) for key in row if key not in ROW_KEYS)
    if unknown:
        warnings.append(f"unknown key(s) ignored: {', '.join(unknown)} (known: {', '.join(ROW_KEYS)})")
    text = row.get("text")
    if text is None:
        raise RowError('the row has no "text"; give the words to speak')
    if not isinstance(text, str):
        raise RowError(f'"text" must be a string, got {_shown(text)}')
    if not text.strip():
        raise RowError("text is empty; give at least one word to speak")
    request = {"text": text}
    for key in OPTIONAL_STRINGS:
        value = row.get(key)
        if value is not None and not isinstance(value, str):
            raise RowError(f'"{key}" must be a string, got {_shown(value)}')
        # An empty cell means "not given" (CSV has no null).
        request[key] = value if value is not None and value.strip() else None
    language, language_id = request.pop("language"), request.pop("language_id")
    if language and language_id and language != language_id:
        raise RowError(f'"language" {_shown(language)} and "language_id" {_shown(language_id)} differ; '
                       'they are one setting (upstream\'s lists name it language_id): give one')
    request.pop("language_name")  # upstream's reports group by it; the model never reads it
    request["language"] = lang_id or language or language_id
    if request["voice"] and request["ref_audio"]:
        raise RowError('give either "voice" (a saved .npz) or "ref_audio" (with its "ref_text", if any), not both')
    if request["ref_text"] and not request["ref_audio"]:
        raise RowError('"ref_text" needs "ref_audio", the clip it transcribes')
    for key, what, fix in (("voice", "voice file", "save one with inference.py --save_voice"),
                           ("ref_audio", "reference clip", "give a WAV, FLAC, OGG or MP3 file")):
        if request[key]:
            request[key] = _resolve(request[key], base_dir)
            if "://" not in request[key] and not os.path.isfile(request[key]):
                raise RowError(f"{what} {request[key]} not found; {fix}")
    request["duration"] = _number(row, "duration", "a number of seconds > 0", lambda v: v > 0)
    request["speed"] = _number(row, "speed", "a number > 0 (> 1 speaks faster)", lambda v: v > 0)
    request["seed"] = _seed(row, row_id, base_seed)
    return row_id, request, warnings


def estimated_frames(request: dict) -> int:
    """Length in codec frames as the runtime's estimator sees it without the voice (enough to group rows)."""
    if request["duration"] is not None:
        return frames_for_duration(request["duration"])
    return estimate_target_tokens(request["text"], None, None, request["speed"] or 1.0)


def check_batch(batch: pa.Table, kind: str, base_dir: str | None, base_seed: int, lang_id: str | None = None) -> pa.Table:
    """The read stage's map: input rows (kind "table") or JSONL lines (kind "lines") -> CHECKED_SCHEMA."""
    out = []
    for item in batch.to_pylist():
        source, blank, row = None, False, item
        if kind == "lines":
            source, line = item.get("path"), item["text"]
            blank = not line.strip()
        record = {"source": source, "blank": blank, "id": None, "request": None, "frames": None,
                  "error": None, "warning": None}
        if not blank:
            try:
                if kind == "lines":
                    try:
                        row = json.loads(line)
                    except ValueError as exc:
                        raise RowError(f"the line is not valid JSON ({exc.msg}); write one object per line") from None
                    if isinstance(row, dict):  # keep the id of a row that fails later checks
                        record["id"] = _id_or_none(row.get("id"))
                else:
                    record["id"] = _id_or_none(row.get("id"))
                row_id, request, warnings = check_row(row, base_dir, base_seed, lang_id)
                record.update(id=row_id, request=json.dumps(request, ensure_ascii=False),
                              frames=estimated_frames(request), warning="; ".join(warnings) or None)
            except RowError as exc:
                record["error"] = str(exc)
        out.append(record)
    return pa.Table.from_pylist(out, schema=CHECKED_SCHEMA)


def _id_or_none(value) -> str | None:
    try:
        return check_id(value)
    except RowError:
        return None


def fingerprint(request: dict, *context) -> str:
    """What the audio depends on: the row (with the sha256 of its voice files), and the settings, format and build
    it was made with."""
    return journal.fingerprint(request, *context)
