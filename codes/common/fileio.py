"""Atomic writes and hashing: an output is either complete or absent."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import secrets
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


# How many files' digests known_sha256 remembers: every graph of a few dozen builds.
KNOWN_DIGESTS = 4096
# A file changed this recently is hashed but not remembered: a file's times tick in steps of a few ms, so a
# second write within the step would leave its identity as it was (git's "racily clean" files).
SETTLED_NS = 2_000_000_000


def known_sha256(paths: list[str | os.PathLike]) -> list[str]:
    """sha256_file of each path, remembered in the user's cache against the file's identity (device, inode,
    size, and modification and change times in ns), so that loading a build again does not read its
    gigabytes again. Any write to a file, even one that puts its modification time back, moves its change
    time, so a changed file is always hashed anew (one changed in the last SETTLED_NS is not remembered).
    The cache is read and written once a call; one that cannot be read or written is no cache."""
    from codes.common.cache import cache_dir

    try:
        store = cache_dir() / "file-digests.json"
        known = json.loads(store.read_text(encoding="utf-8")) if store.is_file() else {}
    except (OSError, ValueError):
        store, known = None, {}
    known = known if isinstance(known, dict) else {}
    digests, learned = [], {}
    for path in paths:
        stat = os.stat(path)
        key = os.path.realpath(path)
        identity = [stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
        entry = known.get(key)
        if isinstance(entry, list) and entry[:-1] == identity:
            digests.append(entry[-1])
            continue
        digests.append(sha256_file(path))
        if time.time_ns() - stat.st_ctime_ns > SETTLED_NS:
            learned[key] = identity + [digests[-1]]
    if store is not None and learned:
        for key in learned:
            known.pop(key, None)
        known.update(learned)
        for stale in list(known)[:max(0, len(known) - KNOWN_DIGESTS)]:
            del known[stale]
        try:
            with atomic_path(store) as tmp:
                tmp.write_text(json.dumps(known), encoding="utf-8")
        except OSError:
            pass
    return digests


@contextmanager
def atomic_path(final: str | os.PathLike, suffix: str = "", exclusive: bool = False,
                folder: str | os.PathLike | None = None):
    """Yield a temporary path beside `final` (or in `folder`, on the same filesystem); rename it onto `final`
    only if the body succeeds. `exclusive`: never replace a `final` that exists (FileExistsError), even one
    that another process writes at the same moment: the first one written wins."""
    final = Path(final)
    tmp = _new_file(Path(folder) if folder is not None else final.parent, f".{final.name}.", suffix or final.suffix)
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


def _new_file(folder: Path, prefix: str, suffix: str) -> str:
    """An empty file of a new name with the usual mode (0o666 less the umask, applied by the kernel):
    mkstemp's are private, and reading the umask means setting it, for every thread at once."""
    for _ in range(tempfile.TMP_MAX):
        path = os.path.join(folder, f"{prefix}{secrets.token_hex(6)}{suffix}")
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666))
        except FileExistsError:
            continue
        return path
    raise FileExistsError(errno.EEXIST, "no unused temporary name", str(folder))


def write_json_atomic(path: str | os.PathLike, data) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def read_json_object(path: str | os.PathLike, fix: str) -> dict:
    """A JSON file holding an object; anything else is a one-line UserError ending with `fix`."""
    from codes.common.errors import UserError

    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); {fix}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a manifest (a JSON object); {fix}")
    return data


def read_bounded(path: str | os.PathLike, limit: int, what: str) -> bytes:
    """A user's input file whole, at most `limit` bytes: a missing or unreadable file, or a larger one (a wrong
    path), is one UserError naming `what` it was meant to be."""
    from codes.common.errors import UserError

    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise UserError(f"cannot read {what} {path} ({exc.strerror or type(exc).__name__}); check the path") from None
    if len(data) > limit:
        raise UserError(f"{what} {path} is over {limit >> 20} MB; is it a {what}?")
    return data

