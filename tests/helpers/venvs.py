"""The venv that holds requirements-runtime.txt alone: what the torch-free tests run in."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def runtime_venv() -> Path:
    """A venv holding requirements-runtime.txt alone, made once and kept in the test cache under the file's
    hash (a fresh clone makes it anew; pip takes what its wheel cache holds)."""
    requirements = REPO_ROOT / "requirements-runtime.txt"
    digest = hashlib.sha256(requirements.read_bytes()).hexdigest()[:16]
    root = Path(os.environ["OMNIVOICE_ONNX_CACHE"]) / "venvs"
    venv = root / f"runtime-{digest}"
    if (venv / "installed").is_file():
        return venv
    root.mkdir(parents=True, exist_ok=True)
    staging = root / f".runtime-{digest}.{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(staging)], check=True)
    install = subprocess.run([str(staging / "bin" / "python"), "-m", "pip", "install", "--quiet", "-r",
                              str(requirements)], capture_output=True, text=True, timeout=900)
    assert install.returncode == 0, install.stderr
    (staging / "installed").write_text(digest)
    try:
        staging.rename(venv)
    except OSError:  # another run made it first: use that one
        shutil.rmtree(staging)
    return venv
