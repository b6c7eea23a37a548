"""The server's folder of finished script pieces, kept for a resubmission of the same script by the same key
(--script-cache-bytes, --script-cache-seconds): each named by a hex key, bounded in bytes and age."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from codes.runtime.script import PIECE_SUFFIX, StoredPiece, read_piece, write_piece

logger = logging.getLogger(__name__)


class PieceStore:
    """A folder of pieces named by key (hex digits only: nothing a client sends names a file), each kept for
    max_age seconds since its last use, and the folder within max_bytes (the least recently used go first).
    Thread-safe enough for one process: files are written whole and replaced atomically."""

    def __init__(self, folder: Path, max_bytes: int, max_age: float):
        self.folder, self.max_bytes, self.max_age = Path(folder), max_bytes, max_age
        self.folder.mkdir(parents=True, exist_ok=True)

    def _path(self, key: str) -> Path:
        if not key or any(c not in "0123456789abcdef" for c in key):
            raise ValueError(f"a store key is hex digits, got {key!r}")
        return self.folder / f"{key}{PIECE_SUFFIX}"

    def get(self, key: str) -> StoredPiece | None:
        path = self._path(key)
        try:
            if time.time() - path.stat().st_mtime > self.max_age:
                path.unlink(missing_ok=True)
                return None
            data = path.read_bytes()
        except OSError:
            return None
        piece = read_piece(data)
        if piece is None:
            logger.warning("script store: %s is damaged; its piece is spoken again", path.name)
            path.unlink(missing_ok=True)
            return None
        os.utime(path)  # used: kept for another max_age
        return piece

    def put(self, key: str, piece: StoredPiece) -> None:
        if self.max_bytes <= 0:
            return
        write_piece(self._path(key), piece)
        self.prune()

    def prune(self) -> None:
        """Drop what is past its age, then the least recently used until the folder fits. Only files of the
        store's own naming are touched."""
        now, kept = time.time(), []
        for path in self.folder.glob(f"*{PIECE_SUFFIX}"):
            try:
                stat = path.stat()
            except OSError:
                continue
            if not all(c in "0123456789abcdef" for c in path.stem):
                continue
            if now - stat.st_mtime > self.max_age:
                path.unlink(missing_ok=True)
            else:
                kept.append((stat.st_mtime, stat.st_size, path))
        total = sum(size for _, size, _ in kept)
        for _, size, path in sorted(kept):
            if total <= self.max_bytes:
                break
            path.unlink(missing_ok=True)
            total -= size
