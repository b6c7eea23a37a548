#!/usr/bin/env python3
"""Quantized builds' fidelity on our CPU kernels and on ONNX Runtime's own ops, side by side
(codes/checks/kernel_fidelity.py). Needs a CPU our kernels run on (AVX-512 VNNI and BF16).

  python bench/kernel_fidelity.py --builds models/full-cpu_int8 --out bench/kernel_fidelity_<isa>.md
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codes.checks.kernel_fidelity import measure, page  # noqa: E402  (the checkout's library, as a script)
from codes.checks.results_page import bench_parser, publish  # noqa: E402
from codes.common.errors import run_cli  # noqa: E402


def main(argv=None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--builds", type=Path, nargs="+", required=True, help="quantized builds (cpu_int8, cpu, ...)")
    p.add_argument("--steps", type=int, default=8, help="teacher-forced steps (default 8, as optimize.py's report)")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--out", type=Path, help="the page to write (and its .json beside it)")
    args = p.parse_args(argv)

    def run() -> None:
        data = measure(args.builds, args.steps, args.threads)
        publish(args.out, "bench/kernel_fidelity.py", argv, page, data)

    return run_cli(run)


if __name__ == "__main__":
    sys.exit(main())
