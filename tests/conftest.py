"""Shared fixtures: the tiny checkpoint and its builds, made once per test session.

Generated artefacts go to a cache inside the checkout (.cache/, git-ignored), so a
fresh clone builds everything from scratch, exactly as CI does.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
os.environ.setdefault("OMNIVOICE_ONNX_CACHE", str(ROOT / ".cache" / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(ROOT))


def run_script(script: str, *args, env: dict | None = None, check: bool = False) -> subprocess.CompletedProcess:
    """Run one of the entry points as a user would; returns the finished process."""
    result = subprocess.run(
        [sys.executable, str(ROOT / script), *map(str, args)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=900,
    )
    if check and result.returncode != 0:
        raise AssertionError(f"{script} {' '.join(map(str, args))} failed:\n{result.stdout}\n{result.stderr}")
    return result


def last_error_line(result: subprocess.CompletedProcess) -> str:
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.fixture(scope="session")
def tiny_checkpoint():
    from codes.export.checkpoint import generated_checkpoint

    return generated_checkpoint("tiny-random")


class Builds:
    """Builds of the tiny checkpoint, made on first use and shared by every test."""

    def __init__(self, root: Path):
        self.root = root
        self._made: dict[tuple, Path] = {}

    def get(self, profile: str, *extra: str) -> Path:
        key = (profile, *extra)
        if key not in self._made:
            output = self.root / "-".join(k.strip("-").replace("_", "-") for k in key)
            run_script("optimize.py", "--model", "tiny-random", "--device", profile, "--output", output,
                       *extra, check=True)
            self._made[key] = output
        return self._made[key]


@pytest.fixture(scope="session")
def builds(tmp_path_factory, tiny_checkpoint):
    return Builds(tmp_path_factory.mktemp("builds"))


@pytest.fixture(scope="session")
def served_build(builds):
    """The tiny fp32 build with its fp32 codec inside: what the server tests run."""
    from synthesis_inputs import FP32_BUILD

    return builds.get(*FP32_BUILD)
