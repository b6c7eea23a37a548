"""A build's real footprint: the peak resident memory of one synthesis, in a process of its own."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def peak_memory_mb(model_dir: Path, threads: int, workload: str, higgs_dir: Path | None = None,
                   backbone: Path | None = None) -> float:
    """Peak resident memory of one synthesis of the workload's first case, in a fresh process.

    Two decoding steps suffice: every step has the same shapes, so the peak is reached in the first.
    """
    root = Path(__file__).resolve().parents[2]  # the repository root, which holds codes/
    out = subprocess.run([sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); "
                          "from codes.checks.peak_memory import _synthesize_once; _synthesize_once(*sys.argv[2:])",
                          str(root), str(model_dir), str(threads), workload, str(higgs_dir or ""), str(backbone or "")],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def _synthesize_once(model_dir: str, threads: str, workload: str, higgs_dir: str, backbone: str) -> None:
    """The child's side: one two-step synthesis, then its peak resident kB printed."""
    from codes.checks.rtf_engines import OnnxEngine
    from codes.checks.workloads import WORKLOADS

    engine = OnnxEngine(model_dir, int(threads), higgs_dir=higgs_dir or None, backbone=backbone or None)
    engine.run(WORKLOADS[workload][0].with_steps(2))
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child would report its parent's peak.
    print(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))
