"""Builds of the tiny checkpoint, each made once per run by whichever xdist worker asks first."""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from helpers.scripts import run_main


def shared_folder(tmp_path_factory) -> Path:
    """A folder this run's pytest processes share (xdist's workers each have a temporary root under it)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextlib.contextmanager
def one_at_a_time(lock: Path):
    """Held by one process at a time: what the first holder makes, the others find made."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


class Builds:
    """Builds of the tiny checkpoint keyed by what they are (profile, codec flags): each made once per run,
    on first use, by whichever worker asks first, and shared by every test."""

    def __init__(self, root: Path):
        self.root = root

    def get(self, profile: str, *extra: str) -> Path:
        output = self.root / "-".join(k.strip("-").replace("_", "-") for k in (profile, *extra))
        made = output.with_name(output.name + ".made")  # beside it: the build owns every file inside
        if not made.is_file():
            with one_at_a_time(output.with_name(output.name + ".lock")):
                if not made.is_file():
                    # optimize.py's own main, in this process: the same build without a new interpreter that
                    # imports torch and Olive again (the walkthrough runs the commands themselves).
                    run_main("optimize.py", "--model", "tiny-random", "--device", profile, "--output", output,
                             *extra, check=True)
                    made.touch()
        return output
