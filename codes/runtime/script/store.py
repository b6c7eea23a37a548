"""Finished pieces kept for a later run of the same script: what each piece's audio depends on (its
fingerprint), a piece's file, and a folder of them bounded in bytes and age (the server's).

A piece's fingerprint covers what its audio is made from (docs/scripts.md, "Editing and re-running"): its
text, language, instruct, duration and speed; its voice's content (a voice file's codes and transcript, not
its name); every generation setting; its noise (seed + index, or none: unseeded); and the build. A made
speaker's later pieces name the fingerprint of the piece their reference comes from instead of a voice, so
a change to a designed speaker's first segment changes all of that speaker's pieces.

A piece's file (.npz) holds its audio and, for a piece that makes its speaker's reference, that reference;
it carries the sha256 of its arrays, so a damaged or truncated file is found and spoken again, never used.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codes.common.fileio import atomic_path
from codes.common.journal import fingerprint
from codes.runtime.synthesis import Voice

logger = logging.getLogger(__name__)
PIECE_SUFFIX = ".npz"
FORMAT = 1


@dataclass(frozen=True)
class StoredPiece:
    audio: np.ndarray  # float32, the piece as decoded (its pads included)
    reference: Voice | None = None  # a made speaker's reference, where this piece made it


def voice_key(voice: Voice) -> str:
    """A voice by its content: two files with the same codes, transcript and level are one voice."""
    digest = hashlib.sha256(np.ascontiguousarray(voice.codes, dtype=np.int64).tobytes())
    return fingerprint(digest.hexdigest(), voice.text, voice.rms)


def piece_fingerprints(plan, build: str) -> list[str]:
    """Each piece's fingerprint, in plan order (pure: no file is read)."""
    prints: list[str] = []
    for piece in plan.pieces:
        segment, defaults = piece.segment, plan.defaults
        if piece.voice.voice is not None:
            voice = {"clone": voice_key(piece.voice.voice)}
        elif piece.makes_reference:
            voice = {"made": piece.voice.instruct}
        else:
            voice = {"reference_from": prints[piece.reference_from]}
        prints.append(fingerprint({
            "text": segment.text, "language": segment.language or defaults.language, "instruct": piece.instruct,
            "duration": segment.duration, "speed": segment.speed or defaults.speed,
            "normalize_text": defaults.normalize_text, "voice": voice, "settings": piece.settings.to_dict(),
            "noise": None if plan.seed is None else plan.seed + piece.index, "build": build,
            "sample_rate": plan.sample_rate}))
    return prints


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        h.update(name.encode())
        h.update(np.ascontiguousarray(arrays[name]).tobytes())
    return h.hexdigest()


def piece_bytes(piece: StoredPiece) -> bytes:
    arrays = {"audio": np.asarray(piece.audio, dtype=np.float32), "format": np.array(FORMAT)}
    if piece.reference is not None:
        arrays.update(ref_codes=np.asarray(piece.reference.codes, dtype=np.int64),
                      ref_text=np.array(piece.reference.text),
                      ref_rms=np.array(np.nan if piece.reference.rms is None else piece.reference.rms))
    buffer = io.BytesIO()
    np.savez(buffer, digest=np.array(_digest(arrays)), **arrays)
    return buffer.getvalue()


def read_piece(data: bytes) -> StoredPiece | None:
    """A piece's file read back; None where it is damaged, truncated or of another format."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            arrays = {name: npz[name] for name in npz.files}
    except (OSError, ValueError, EOFError, KeyError, zipfile.BadZipFile, zipfile.LargeZipFile):
        return None
    digest = arrays.pop("digest", None)
    if digest is None or digest.shape != () or str(digest) != _digest(arrays) or "audio" not in arrays \
            or arrays.get("format") is None or int(arrays["format"]) != FORMAT:
        return None
    reference = None
    if "ref_codes" in arrays:
        rms = float(arrays["ref_rms"])
        reference = Voice(arrays["ref_codes"], str(arrays["ref_text"]), None if np.isnan(rms) else rms)
    return StoredPiece(arrays["audio"].astype(np.float32, copy=False), reference)


def write_piece(path: Path, piece: StoredPiece) -> int:
    """The piece's file, written whole or not at all; returns its size."""
    data = piece_bytes(piece)
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return len(data)


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
