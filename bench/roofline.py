#!/usr/bin/env python3
"""One decoding step against this CPU's measured ceiling: kernels, bandwidth, and where the step stands.

  .venv/bin/python bench/roofline.py --model_dir models/full-cpu_int8 --out bench/roofline_results.md

Measures, with --threads intra-op threads (default 2):
- the peak GMAC/s of the GEMM kernels the step could use (DynamicQuantizeMatMul, bare MatMulInteger,
  MatMulNBits with int8 compute, fp32 MatMul) at the step's shapes (M tokens of --m, K x N of the fused
  q/k/v, o, gate/up (apart and fused) and down projections) and at a large square shape;
- attention (GroupQueryAttention and MultiHeadAttention, with and without the bias) at --seq lengths;
- the memory bandwidth (a threaded Add far past the caches);
- one decoding step of the 10 s utterance and of a 2 s reply on the build, op by op from ONNX Runtime's
  profiler: each op class's achieved rate against the best measured kernel at its shapes, and the
  step against the sum of those ceilings.
--compare adds other builds' steps to the same table (for before and after, measured side by side).
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codes.checks.results_page import bench_parser  # noqa: E402

from codes.checks.roofline_report import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main(bench_parser(__doc__)))
