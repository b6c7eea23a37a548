"""Files the runtimes write and read: checked before any compute, written atomically.

inference.py and higgs_inference.py share these, so a bad output path gets the
same one-line error everywhere and a failure never leaves a partial file.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.common.fileio import atomic_path


def check_output_path(path, what: str = "output") -> Path:
    """Fail early if `path` cannot be written: missing folder, a file or folder in the way, no permission."""
    path = Path(path)
    folder = path.resolve().parent
    if path.is_dir():
        raise UserError(f"{what} {path} is a folder; give a file name")
    if folder.exists() and not folder.is_dir():
        raise UserError(f"cannot write {what} {path}: {folder} is a file, not a folder")
    if not folder.is_dir():
        raise UserError(f"cannot write {what} {path}: folder {folder} does not exist; create it or choose another path")
    if not os.access(folder, os.W_OK):
        raise UserError(f"cannot write {what} {path}: folder {folder} is not writable")
    return path


def check_audio_output_path(path, what: str = "audio output") -> Path:
    import soundfile

    path = check_output_path(path, what)
    if path.suffix[1:].upper() not in soundfile.available_formats():
        raise UserError(f"{what} {path} needs an extension soundfile writes (.wav, .flac, .ogg), got {path.suffix!r}")
    return path


def write_audio(path, wav: np.ndarray, sample_rate: int, float_wav: bool = False, part_folder=None) -> None:
    """16-bit PCM by default (float with float_wav); the format follows the extension. part_folder: where the
    file is written before it is renamed into place (default: beside it)."""
    with atomic_path(path, folder=part_folder) as tmp:
        encode_audio(tmp, wav, sample_rate, float_wav)


def encode_audio(path, wav: np.ndarray, sample_rate: int, float_wav: bool = False) -> None:
    """write_audio without the atomic rename, for a caller that publishes the file itself."""
    import soundfile

    path = Path(path)
    subtype = "FLOAT" if float_wav else ("PCM_16" if path.suffix.lower() == ".wav" else None)
    soundfile.write(str(path), np.asarray(wav, dtype=np.float32), sample_rate, subtype=subtype)


def save_codes(path, codes: np.ndarray) -> None:
    with atomic_path(path, suffix=".npy") as tmp, open(tmp, "wb") as f:
        np.save(f, np.asarray(codes, dtype=np.int64), allow_pickle=False)


def load_codes(path) -> np.ndarray:
    """A codes array from a .npy file; its shape, dtype and range are checked by whoever uses it."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"codes file not found: {path}")
    with open(path, "rb") as f:
        if f.read(6) != b"\x93NUMPY":
            raise UserError(f"codes file {path} is not a .npy file; write codes with numpy.save or --codes_out")
    try:
        return np.load(path, allow_pickle=False)
    except Exception as exc:  # numpy raises ValueError/OSError/EOFError for foreign files
        detail = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"cannot read codes file {path}: {detail}; it must be a .npy array written by numpy.save") from None
