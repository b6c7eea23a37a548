"""Atomic writes and hashing: an output is either complete or absent."""

from __future__ import annotations

import errno
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
def atomic_path(final: str | os.PathLike, suffix: str = "", exclusive: bool = False):
    """Yield a temporary path beside `final`; rename it onto `final` only if the body succeeds.
    `exclusive`: never replace a `final` that exists (FileExistsError), even one that another process
    writes at the same moment: the first one written wins."""
    final = Path(final)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=suffix or final.suffix, dir=final.parent)
    os.close(fd)
    os.chmod(tmp, 0o666 & ~_umask())  # mkstemp files are private; outputs get the usual mode
    try:
        yield Path(tmp)
        if exclusive:
            _publish_new(tmp, final)
        else:
            os.replace(tmp, final)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _publish_new(tmp: str, final: Path) -> None:
    """A hard link makes `final` appear whole or not at all, and fails if it exists (on NFS too)."""
    try:
        os.link(tmp, final)
    except FileExistsError:
        raise
    except OSError:  # a filesystem without hard links: a check, then a rename
        if final.exists():
            raise FileExistsError(errno.EEXIST, "file exists", str(final)) from None
        os.replace(tmp, final)
        return
    os.unlink(tmp)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike, data) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
