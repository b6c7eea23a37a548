"""What OUT_DIR holds and why: the ledger a rerun trusts, and the results table people read.

OUT_DIR/
  audio/<id>.<format>     written by the actors under a hidden name, then published exclusively
                          (a hard link that fails if the name exists): a file that appears there
                          meanwhile is kept, and the row's record says so
  results.parquet         one record per input row of the last run (results.jsonl: the same, for people)
  .results/ledger.jsonl   one record per audio path this command has claimed, written or failed;
                          appended and fsynced after every batch, so a killed run keeps what it finished
  .results/written/       an actor's record of a file, written just before the file is published:
                          a run killed before its batch reached the ledger still knows the file is its own
  .results/speaking/      one marker per row an actor is speaking; a marker still there when the row
                          comes round again means its actor died on it (a crash, not a Python error)
  .results/lock           held while a run uses OUT_DIR

A file under audio/ is this command's only if a record says this command wrote it and the file's
sha256 is the one recorded: a claimed, failed or crashed row owns nothing, so a user's file placed
at its name later is never replaced. Anything else in OUT_DIR is never touched.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from codes.common.errors import UserError
from codes.common.fileio import atomic_path, sha256_file
from codes.common.journal import Journal, lock_folder, read_records, rewrite_records

RESULT_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("row", pa.string()),  # where the row is in the input: "line 7", "row 7"
    ("status", pa.string()),  # ok, error (the ledger also holds "pending")
    ("error", pa.string()),
    ("warning", pa.string()),
    ("audio_path", pa.string()),  # relative to OUT_DIR
    ("audio_seconds", pa.float64()),
    ("synthesis_seconds", pa.float64()),
    ("actor", pa.string()),  # host:pid of the actor that spoke it
    ("seed", pa.int64()),  # inference.py --seed with the row's inputs gives the same audio
    ("fingerprint", pa.string()),  # the row, settings, format and build the audio was made from
    ("audio_bytes", pa.int64()),  # a file of another size is not the one written
    ("audio_sha256", pa.string()),  # the file as written: only a file with this hash is ours to replace
])
COLUMNS = RESULT_SCHEMA.names
WRITER_KEY, WRITER = b"writer", b"omnivoice-onnx corpus.py"
STATE_DIR, LEDGER, LOCK = ".results", "ledger.jsonl", "lock"
WRITTEN, SPEAKING = "written", "speaking"
RESULTS_PARQUET, RESULTS_JSONL = "results.parquet", "results.jsonl"
AUDIO_DIR = "audio"
# atomic_path's temporary names: "." + final name + "." + 12 hex digits + suffix.
TEMPORARY = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{12}\.(?:wav|flac|json)$")
# A row whose actor died while speaking it: its record's error starts with this, and a rerun skips it
# (the same row would take the next actor down too) unless --retry-failed is given.
CRASHED = "its actor died while speaking this row (a crash in the runtime, or killed for memory)"


def record(**values) -> dict:
    """A full result record (every column present)."""
    unknown = set(values) - set(COLUMNS)
    assert not unknown, unknown
    return {name: values.get(name) for name in COLUMNS}


def audio_path(audio_dir: str, name: str) -> str:
    """A file's path relative to OUT_DIR: under audio/, or (upstream's --res_dir layout, audio_dir "") beside
    the results."""
    return f"{audio_dir}/{name}" if audio_dir else name


def check_output_dir(out_dir: Path, audio_dir: str = AUDIO_DIR) -> None:
    """Fail before anything is written if OUT_DIR cannot be ours: a file in the way, or results we did not write."""
    for path, what in ((out_dir, "--output"), (out_dir / audio_dir, "audio folder"),
                       (out_dir / STATE_DIR, "state folder")):
        if path.exists() and not path.is_dir():
            raise UserError(f"{what} {path} is a file, not a folder; choose another --output")
    if not _is_ours(out_dir):
        foreign = [name for name in (RESULTS_PARQUET, RESULTS_JSONL) if (out_dir / name).exists()]
        if foreign:
            raise UserError(f"{out_dir} holds {' and '.join(foreign)} that corpus.py did not write; "
                            "move them or choose another --output")


def _is_ours(out_dir: Path) -> bool:
    if (out_dir / STATE_DIR / LEDGER).is_file():
        return True
    try:
        metadata = pq.read_schema(out_dir / RESULTS_PARQUET).metadata or {}
    except (OSError, pa.ArrowException):
        return False
    return metadata.get(WRITER_KEY) == WRITER


class Ledger:
    def __init__(self, out_dir: Path, audio_dir: str = AUDIO_DIR):
        """Create OUT_DIR's folders, take its lock and load the ledger (call check_output_dir first)."""
        self.out_dir = out_dir
        self.audio_subdir = audio_dir
        self.audio_dir = out_dir / audio_dir
        self.state_dir = out_dir / STATE_DIR
        adopt_results = not (self.state_dir / LEDGER).is_file() and _is_ours(out_dir)
        try:
            self.audio_dir.mkdir(parents=True, exist_ok=True)
            self.state_dir.mkdir(exist_ok=True)
            (self.state_dir / WRITTEN).mkdir(exist_ok=True)
            (self.state_dir / SPEAKING).mkdir(exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create {out_dir} ({exc.strerror}); choose another --output") from None
        self._lock = lock_folder(self.state_dir / LOCK, f"another corpus.py run is using {out_dir}; wait for it "
                                                        "to finish or choose another --output")
        self.entries: dict[str, dict] = {}  # audio_path -> its latest record
        if adopt_results:  # the ledger was deleted; the last results table still says what is ours
            self._take(pq.read_table(out_dir / RESULTS_PARQUET).to_pylist())
        else:
            self._take(read_records(self.state_dir / LEDGER)[0])
        # A marker left by an earlier run says only that the run was stopped (Ctrl-C, a kill), not that its row
        # crashed an actor: markers count within one run.
        for marker in (self.state_dir / SPEAKING).iterdir():
            marker.unlink(missing_ok=True)
        self._settle_receipts()
        self.compact()  # drops a line a killed run left half-written, before anything is appended
        self._journal = Journal(self.state_dir / LEDGER)

    def _take(self, records) -> None:
        for item in records:
            if isinstance(item, dict) and isinstance(item.get("audio_path"), str):
                self.entries[item["audio_path"]] = record(**{k: item.get(k) for k in COLUMNS})

    def claims(self, audio_path: str) -> bool:
        """The ledger names the path (claimed, written or failed): hidden temporaries beside it are ours."""
        return audio_path in self.entries

    def wrote(self, audio_path: str) -> bool:
        """The file at the path is one this command wrote: recorded as written, and still the same bytes."""
        entry = self.entries.get(audio_path)
        return bool(entry) and entry["status"] == "ok" and is_file_written(self.out_dir / audio_path, entry)

    def is_done(self, audio_path: str, fingerprint: str) -> bool:
        """The row's audio is complete and made from this very request: a rerun may skip it.
        The size is checked, not the hash: a rerun of a large corpus must not read every file."""
        entry = self.entries.get(audio_path)
        if not entry or entry["status"] != "ok" or entry["fingerprint"] != fingerprint:
            return False
        try:
            return os.path.getsize(self.out_dir / audio_path) == entry["audio_bytes"]
        except OSError:
            return False

    def crashed(self, audio_path: str, fingerprint: str) -> bool:
        """This very request took its actor down last time: speaking it again would do the same."""
        entry = self.entries.get(audio_path)
        return bool(entry) and entry["status"] == "error" and entry["fingerprint"] == fingerprint \
            and (entry["error"] or "").startswith(CRASHED)

    def discard(self, audio_path: str) -> bool:
        """Delete the file at the path if this command wrote it (its row is redone, and the new file is published
        exclusively); False, and nothing touched, if it is someone else's."""
        if not self.wrote(audio_path):
            return False
        (self.out_dir / audio_path).unlink(missing_ok=True)
        return True

    def _settle_receipts(self) -> None:
        """Take in the records actors wrote for files a killed run published but never got into the ledger.
        A receipt whose file is not there yet stays (its actor may still be publishing, after a Ctrl-C)."""
        for receipt in (self.state_dir / WRITTEN).glob("*.json"):
            try:
                item = json.loads(receipt.read_text(encoding="utf-8"))
            except (OSError, ValueError):  # half-written: its file was never published
                item = None
            if isinstance(item, dict) and isinstance(item.get("audio_path"), str):
                item = record(**{k: item.get(k) for k in COLUMNS})
                final = self.out_dir / item["audio_path"]
                if not (final.exists() or final.is_symlink()):
                    continue
                entry = self.entries.get(item["audio_path"])
                held = entry and entry["status"] == "ok" and entry["audio_sha256"] == item["audio_sha256"]
                if not held and is_file_written(final, item):
                    self.entries[item["audio_path"]] = item
            receipt.unlink(missing_ok=True)

    def append(self, records: list[dict]) -> None:
        """Records reach the disk before the next batch is taken: a kill loses at most the batches in flight."""
        if not records:
            return
        self._take(records)
        self._journal.append(records)

    def compact(self) -> None:
        rewrite_records(self.state_dir / LEDGER, self.entries.values())

    def remove_temporaries(self) -> int:
        """Delete hidden temporaries a killed run left beside files the ledger owns (never anything else)."""
        removed = 0
        with os.scandir(self.audio_dir) as found:
            for item in found:
                match = TEMPORARY.match(item.name)
                if match and item.is_file(follow_symlinks=False) and self.claims(audio_path(self.audio_subdir, match["name"])):
                    try:
                        os.unlink(item.path)
                        removed += 1
                    except FileNotFoundError:  # its writer finished after all
                        pass
        return removed

    def write_results(self, records: list[dict]) -> None:
        table = pa.Table.from_pylist(records, schema=RESULT_SCHEMA.with_metadata({WRITER_KEY: WRITER}))
        with atomic_path(self.out_dir / RESULTS_PARQUET) as tmp:
            pq.write_table(table, tmp)
        rewrite_records(self.out_dir / RESULTS_JSONL, records)

    def close(self) -> None:
        self._journal.close()
        self._settle_receipts()
        self.compact()
        self._lock.close()  # releases the lock


def is_file_written(path: Path, entry: dict) -> bool:
    """The file is the one the record describes (never a link: the actors write none)."""
    if path.is_symlink() or not path.is_file():
        return False
    if entry["audio_sha256"] is None:  # recorded before hashes were: the size is all there is
        return os.path.getsize(path) == entry["audio_bytes"]
    return os.path.getsize(path) == entry["audio_bytes"] and sha256_file(path) == entry["audio_sha256"]

