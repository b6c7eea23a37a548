"""Shared fixtures: the tiny checkpoint and its builds, made once per run and shared by every xdist worker,
and how a test runs an entry point (a new process, or its main in this one).

Generated artefacts go to a cache inside the checkout (.cache/, git-ignored), so a
fresh clone builds everything from scratch, exactly as CI does.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib
import io
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


# Under pytest-xdist (`make test`) each module runs whole on one worker, so its module-scoped servers start
# once; the modules that start a local Ray share one worker, so two never run at once. The long modules go
# first, so that no worker is left waiting at the end on one that started last.
RAY_MODULES = ("test_corpus", "test_cluster", "test_playground")  # test_playground: its last test runs serve.py --ray
LONG_MODULES = ("test_walkthrough", "test_optimize", *RAY_MODULES, "test_hostile", "test_wyoming_hostile", "test_doors",
                "test_published", "test_bench", "test_inference", "test_serve", "test_latency")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.module.__name__, len(rank)))  # stable: file order otherwise


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class ModuleScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "ray" if Path(path).stem in RAY_MODULES else path

    config.option.loadscopereorder = False  # keep the order above, not the modules with the most tests first
    return ModuleScheduling(config, log)


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


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    from codes.export.checkpoint import generated_checkpoint

    with one_at_a_time(shared_folder(tmp_path_factory) / "tiny-random.lock"):
        return generated_checkpoint("tiny-random")


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


@pytest.fixture(scope="session")
def builds(tmp_path_factory, tiny_checkpoint):
    return Builds(shared_folder(tmp_path_factory) / "builds")


@pytest.fixture(scope="session")
def served_build(builds):
    """The tiny fp32 build with its fp32 codec inside: what the server tests run."""
    from synthesis_inputs import FP32_BUILD

    return builds.get(*FP32_BUILD)
