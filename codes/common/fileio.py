"""Atomic writes and hashing: an output is either complete or absent."""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


@contextmanager
def atomic_path(final: str | os.PathLike, suffix: str = ""):
    """Yield a temporary path beside `final`; rename it onto `final` only if the body succeeds."""
    final = Path(final)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix or final.suffix, dir=final.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp files are private; outputs get the usual mode
    try:
        yield Path(tmp)
        os.replace(tmp, final)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike, data) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
