"""A build's hidden staging folder beside its output, and the clean-up of those a killed build left.

Each staging folder holds `.builder`, a file its build keeps open with an exclusive flock for the
build's lifetime. The kernel drops the lock when the builder dies, however it dies, so a lock that
can be taken means the builder is gone; a reused pid cannot fool it. A folder that matches the name
but holds no such record is not ours and is never touched.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import tempfile
import time
from pathlib import Path

BUILDER = ".builder"
PATTERN = ".*.building-*"  # any output's staging folder: .<output>.building-<random>
PREVIOUS = ".previous"  # where installing moves the files it replaces, until the build is in place
WORK = ".work"  # the build's scratch (Olive's runs, merged or smoothed checkpoints): removed with its staging folder


def make_staging(parent: Path, output_name: str) -> tuple[Path, object]:
    """A new staging folder in parent, already locked by this process; close the returned lock after
    removing the folder."""
    staging = Path(tempfile.mkdtemp(prefix=f".{output_name}.building-", dir=parent))
    try:
        staging.chmod(0o755)  # mkdtemp makes it private; a build folder is meant to be shared
        return staging, hold_lock(staging)
    except BaseException:  # without its record nothing would ever remove it
        shutil.rmtree(staging, ignore_errors=True)
        raise


def hold_lock(staging: Path):
    """Take the staging folder's lock and return its open file, which holds the lock until closed."""
    # Locked under another name, then renamed: a clean-up never sees a `.builder` not yet locked.
    fd, pending = tempfile.mkstemp(prefix=".builder-", dir=staging)
    lock = os.fdopen(fd, "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    lock.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    lock.flush()
    os.replace(pending, staging / BUILDER)
    return lock


def remove_stale(parent: Path, log=print) -> list[Path]:
    """Remove the staging folders in parent whose builder is gone; returns them."""
    removed = []
    for folder in sorted(parent.glob(PATTERN)):
        if folder.is_symlink() or not folder.is_dir():
            continue
        lock = _orphan_lock(folder)
        if lock is None:
            continue
        try:  # removed under its lock, so two builds cleaning up at once never both claim it
            claimed = (folder / BUILDER).exists() and not _holds_previous(folder, log)
            if claimed:
                shutil.rmtree(folder, ignore_errors=True)
        finally:
            os.close(lock)
        if claimed and not folder.exists():
            log(f"removed {folder}, the staging folder of a build that was killed")
            removed.append(folder)
    return removed


def _holds_previous(folder: Path, log) -> bool:
    """A build killed while moving its files in left the old build's files here: the only copy."""
    if not (folder / PREVIOUS).exists():
        return False
    log(f"kept {folder}: a build killed while installing moved the previous build's files into {PREVIOUS}/")
    return True


def _orphan_lock(folder: Path) -> int | None:
    """The folder's lock, taken, if it carries our record and no builder holds it; else None."""
    try:
        # Read-write: where flock is emulated by byte-range locks (NFS) an exclusive one needs it.
        fd = os.open(folder / BUILDER, os.O_RDWR | os.O_NOFOLLOW)
    except OSError:  # no record (not ours), a link, or another user's: leave it alone
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # held: its build is running
        os.close(fd)
        return None
    return fd
