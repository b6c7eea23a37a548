"""A script's ledger, beside its output: each piece spoken is kept as it finishes, so a run that was
killed resumes, and a run of an edited script speaks only the pieces whose fingerprint is new.

OUTPUT.ledger/                 the output's own folder (dub.wav -> dub.wav.ledger/); nothing outside it is
                               ever deleted, and no name in it comes from the user
  ledger.jsonl                 {"build"}: the build it was made with; one record per piece kept
                               {"fingerprint", "bytes", "seconds"} (the file checks its own content);
                               {"output"}: the output last written from it (its name, size and sha256)
  pieces/<fingerprint>.npz     a piece's audio (and a made speaker's reference), written whole
  lock                         held while a run uses the folder
  .<output name>.<hex>.<ext>   the output being written: renamed onto the output once whole, so a kill
                               at any moment leaves the old output or the new one, never half of one

Nothing is trusted silently: a ledger of another build, an output changed since the ledger wrote it, a
damaged journal line or piece file is each said in one line, and what it affects is spoken again.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from codes.common.errors import UserError
from codes.common.fileio import sha256_file
from codes.common.journal import Journal, lock_folder, read_records, rewrite_records
from codes.runtime.script.fingerprints import piece_fingerprints
from codes.runtime.script.pieces import PIECE_SUFFIX, StoredPiece, read_piece, write_piece

logger = logging.getLogger(__name__)
LEDGER_SUFFIX = ".ledger"
JOURNAL, PIECES, LOCK = "ledger.jsonl", "pieces", "lock"
HEX = re.compile(r"^[0-9a-f]{32}$")


def ledger_folder(output: Path) -> Path:
    return output.with_name(output.name + LEDGER_SUFFIX)


class ScriptLedger:
    """The ledger of one output, open for one run: open it before any compute (a folder that cannot be a
    ledger is refused then), reusable() once the plan is made, keep() as each piece finishes, finish() once
    the output is written, close() always. say: where its one-line notices go (the CLI's stderr)."""

    def __init__(self, output: Path, say=logger.warning):
        self.output, self.folder, self.say = Path(output), ledger_folder(Path(output)), say
        if self.folder.exists() and not self.folder.is_dir():
            raise UserError(f"{self.folder} is a file, not a script ledger; move it or choose another --output")
        if self.folder.is_dir() and not (self.folder / JOURNAL).is_file() and any(self.folder.iterdir()):
            raise UserError(f"{self.folder} holds files that are not a script ledger; move them or choose another "
                            "--output (or give --no_ledger)")
        self._made = not self.folder.exists()  # a run that keeps nothing removes the folder it made
        try:
            (self.folder / PIECES).mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UserError(f"cannot create {self.folder} ({exc.strerror}); choose another --output") from None
        self._lock = lock_folder(self.folder / LOCK, f"another run is writing {self.output}; wait for it to finish "
                                                     "or choose another --output")
        records, damaged = read_records(self.folder / JOURNAL)
        if damaged:
            self.say(f"{self.folder / JOURNAL}: {damaged} damaged line(s) skipped; the pieces they held are "
                     "spoken again")
        self.build = next((r.get("build") for r in records if "build" in r), None)
        self.pieces = {r["fingerprint"]: r for r in records
                       if isinstance(r.get("fingerprint"), str) and HEX.match(r["fingerprint"])}
        self.last_output = next((r["output"] for r in reversed(records) if isinstance(r.get("output"), dict)), None)
        self._journal: Journal | None = None
        self.fingerprints: list[str] = []
        self.sample_rate = 0

    def _piece_path(self, key: str) -> Path:
        return self.folder / PIECES / f"{key}{PIECE_SUFFIX}"

    def _rewrite(self) -> None:
        """The journal as what this ledger holds now, replaced whole."""
        rewrite_records(self.folder / JOURNAL, [{"build": self.build}, *self.pieces.values(),
                                                *([{"output": self.last_output}] if self.last_output else [])])

    def reusable(self, plan, build: str) -> dict[int, StoredPiece]:
        """The plan's pieces this ledger holds, checked; says what it found where it cannot be trusted."""
        self.fingerprints, self.sample_rate = piece_fingerprints(plan, build), plan.sample_rate
        if self.build is not None and self.build != build and self.pieces:
            self.say(f"{self.folder} was written by another build; its {len(self.pieces)} piece(s) are not used, "
                     "every segment is spoken again")
            self.pieces = {}
        self._check_output()
        kept: dict[int, StoredPiece] = {}
        damaged = []
        for index, key in enumerate(self.fingerprints):
            entry = self.pieces.get(key)
            if entry is None:
                continue
            piece = self._read(key, entry)
            if piece is None:
                damaged.append(index + 1)
                del self.pieces[key]
            else:
                kept[index] = piece
        if damaged:
            self.say(f"{self.folder}: the kept audio of segment(s) {', '.join(map(str, damaged))} is damaged or "
                     "missing; they are spoken again")
        self.build = build
        self._rewrite()
        self._journal = Journal(self.folder / JOURNAL)
        return kept

    def _check_output(self) -> None:
        if self.last_output is None or not self.output.is_file():
            return
        if self.last_output.get("name") != self.output.name or self.last_output.get("bytes") != self.output.stat().st_size \
                or self.last_output.get("sha256") != sha256_file(self.output):
            self.say(f"{self.output} is not the file this ledger last wrote (it changed since); it is written anew, "
                     "from the pieces the ledger holds")

    def _read(self, key: str, entry: dict) -> StoredPiece | None:
        try:
            data = self._piece_path(key).read_bytes()
        except OSError:
            return None
        if len(data) != entry.get("bytes"):
            return None
        return read_piece(data)

    def keep(self, index: int, piece: StoredPiece) -> None:
        """A piece just finished: on the disk, then in the journal, before the run goes on."""
        key = self.fingerprints[index]
        size = write_piece(self._piece_path(key), piece)
        entry = {"fingerprint": key, "bytes": size, "seconds": round(len(piece.audio) / self.sample_rate, 3)}
        self.pieces[key] = entry
        self._journal.append([entry])

    def finish(self) -> None:
        """The output is written: record it, and delete the pieces no longer in the script (only files this
        ledger names, in its own folder)."""
        wanted = set(self.fingerprints)
        for key in [k for k in self.pieces if k not in wanted]:
            self._piece_path(key).unlink(missing_ok=True)
            del self.pieces[key]
        self.last_output = {"name": self.output.name, "bytes": self.output.stat().st_size,
                            "sha256": sha256_file(self.output)}
        self._rewrite()

    def remove_temporaries(self) -> None:
        """The parts a killed run left in this folder: its output's, and pieces' (atomic_path's names)."""
        for folder in (self.folder, self.folder / PIECES):
            for path in folder.iterdir():
                if path.name.startswith(".") and path.is_file() and not path.is_symlink():
                    path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
        if self._made and not self.pieces and self.last_output is None:  # failed before it kept anything
            for path in (self.folder / JOURNAL, self.folder / LOCK):
                path.unlink(missing_ok=True)
            for folder in (self.folder / PIECES, self.folder):
                try:
                    folder.rmdir()
                except OSError:  # something else is in it now: it stays
                    break
        self._lock.close()
