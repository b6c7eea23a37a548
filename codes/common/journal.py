"""What a resumable run keeps on disk, shared by corpus.py's ledger and a script's (codes/runtime/script/ledger.py):
a fingerprint of what a result was made from, a JSON-lines journal appended and fsynced as results land,
and a lock that keeps two runs out of one folder.

A journal's last line may be half-written (a killed run): reading skips any line that is not a JSON object
and counts it, so a damaged journal costs the records it lost, never the run.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
from pathlib import Path

from codes.common.errors import UserError
from codes.common.fileio import atomic_path


def fingerprint(*parts) -> str:
    """What a result depends on, as 32 hex digits: any JSON-able parts (dict keys in any order)."""
    text = json.dumps(list(parts), sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def read_records(path: Path) -> tuple[list[dict], int]:
    """(the journal's records in order, how many lines were damaged); a missing journal has none."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return [], 0
    except OSError as exc:
        raise UserError(f"cannot read {path} ({exc.strerror}); check its permissions or move it away") from None
    records, damaged = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            item = None
        if isinstance(item, dict):
            records.append(item)
        else:
            damaged += 1
    return records, damaged


def rewrite_records(path: Path, records) -> None:
    """The journal as exactly these records, replaced whole (drops a half-written last line)."""
    with atomic_path(path) as tmp:
        tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


class Journal:
    """A journal open for appending: each append is on the disk before it returns."""

    def __init__(self, path: Path):
        self.path = path
        self._file = open(path, "a", encoding="utf-8")

    def append(self, records) -> None:
        records = list(records)
        if not records:
            return
        self._file.write("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        self._file.close()


def lock_folder(path: Path, busy: str):
    """An exclusive lock on the file `path` (made if missing), held until the returned file is closed;
    a folder another run holds is the one-line UserError `busy`."""
    try:
        handle = open(path, "a")
    except OSError as exc:
        raise UserError(f"cannot create {path} ({exc.strerror}); choose another output") from None
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        raise UserError(busy) from None
    return handle
