"""A finished piece kept for a later run of the same script (a ledger's, or the server's folder): its file.

A piece's file (.npz) holds its audio and, for a piece that makes its speaker's reference, that reference;
it carries the sha256 of its arrays, so a damaged or truncated file is found and spoken again, never used.
"""

from __future__ import annotations

import hashlib
import io
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codes.common.fileio import atomic_path
from codes.runtime.request import Voice

PIECE_SUFFIX = ".npz"
FORMAT = 1


@dataclass(frozen=True)
class StoredPiece:
    audio: np.ndarray  # float32, the piece as decoded (its pads included)
    reference: Voice | None = None  # a made speaker's reference, where this piece made it


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
