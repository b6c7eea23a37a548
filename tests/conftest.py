"""Shared fixtures: the tiny checkpoint and its builds, made once per run and shared by every xdist worker,
and how the modules are spread over the workers. What tests share by import is in helpers/.

Generated artefacts go to a cache inside the checkout (.cache/, git-ignored), so a
fresh clone builds everything from scratch, exactly as CI does.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from helpers.builds import Builds, one_at_a_time, shared_folder
from helpers.scripts import ROOT

os.environ.setdefault("OMNIVOICE_ONNX_CACHE", str(ROOT / ".cache" / "tests"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(ROOT))


# Under pytest-xdist (`make test`) each module runs whole on one worker, so its module-scoped servers start
# once; the modules that start a local Ray share one worker, so two never run at once. The long modules go
# first, so that no worker is left waiting at the end on one that started last. Modules go by file name, which
# is unique across tests/'s folders (pytest's import mode, with no __init__.py, needs that as well).
RAY_MODULES = ("test_corpus", "test_cluster", "test_script_ray", "test_playground")  # test_playground: its last test runs serve.py --ray
LONG_MODULES = ("test_walkthrough", "test_optimize", *RAY_MODULES, "test_web_page", "test_node_parity", "test_web_build",
                "test_hostile", "test_wyoming_hostile", "test_doors",
                "test_published", "test_bench", "test_inference", "test_serve", "test_latency", "test_ws_door",
                "test_plugins", "test_transcribed_uploads", "test_script_door", "test_word_timings", "test_script_ledger")


def pytest_collection_modifyitems(config, items):
    unknown = set(LONG_MODULES) - {path.stem for path in Path(__file__).parent.rglob("test_*.py")}
    if unknown:  # a renamed module would silently lose its worker or its place
        raise pytest.UsageError(f"tests/conftest.py schedules modules that do not exist: {sorted(unknown)}; "
                                "rename them in LONG_MODULES/RAY_MODULES too")
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


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory):
    from codes.export.checkpoint import generated_checkpoint

    with one_at_a_time(shared_folder(tmp_path_factory) / "tiny-random.lock"):
        return generated_checkpoint("tiny-random")


@pytest.fixture(scope="session")
def builds(tmp_path_factory, tiny_checkpoint):
    return Builds(shared_folder(tmp_path_factory) / "builds")


@pytest.fixture(scope="session")
def asr_build(builds):
    """The tiny fp32 build with a tiny Whisper recogniser inside: what clips without transcripts and word timings need."""
    from helpers.synthesis_inputs import ASR_BUILD

    return builds.get(*ASR_BUILD)


@pytest.fixture(scope="session")
def served_build(builds):
    """The tiny fp32 build with its fp32 codec inside: what the server tests run."""
    from helpers.synthesis_inputs import FP32_BUILD

    return builds.get(*FP32_BUILD)


def _kernel_widths() -> list[int]:
    """The vector widths our kernels run at on this CPU (codes/runtime/native/lanes.h): 16 and 8 on AVX-512 VNNI
    and BF16, 8 alone on AVX2, 0 (the library refuses) below."""
    from codes.common.isa import native_kernel_lanes

    return [w for w in (16, 8) if w <= native_kernel_lanes()] or [0]


@pytest.fixture(params=_kernel_widths(), ids=lambda lanes: f"{lanes}-lanes")
def kernel_lanes(request, monkeypatch) -> int:
    """A test of our kernels at each width this CPU runs them at: 8 on a wider CPU through the switch that the
    library reads at registration, as an AVX2-only CPU runs them."""
    from codes.runtime.contract import native_kernels

    monkeypatch.delenv(native_kernels.SWITCH, raising=False)
    if request.param == 8:
        monkeypatch.setenv(native_kernels.SWITCH, native_kernels.EIGHT_LANES)
    return request.param
