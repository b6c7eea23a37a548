"""How a test runs an entry point: a new process, or its main in this one."""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_script(script: str, *args, env: dict | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """Run one of the entry points as a user would; returns the finished process."""
    result = subprocess.run(
        [sys.executable, str(ROOT / script), *map(str, args)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=900,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{script} {' '.join(map(str, args))} failed:\n{result.stdout}\n{result.stderr}")
    return result


def run_main(script: str, *args, check: bool = False) -> subprocess.CompletedProcess:
    """An entry point's main() in this process, exit code and printed lines as run_script gives them: for
    checks of what a command computes, where no process boundary is under test (the interpreter, torch and
    Olive are already loaded here)."""
    from codes.common.errors import run_cli

    module = importlib.import_module(Path(script).stem)
    argv = [str(a) for a in args]
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = run_cli(lambda: module.main(argv))
    result = subprocess.CompletedProcess([script, *argv], code, stdout.getvalue(), stderr.getvalue())
    if check and code != 0:
        raise AssertionError(f"{script} {' '.join(argv)} failed:\n{result.stdout}\n{result.stderr}")
    return result


def last_error_line(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
