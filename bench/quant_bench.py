#!/usr/bin/env python3
"""int8 schemes side by side on plain and outlier weights: fidelity, step time, peak memory
(codes/checks/quant_bench.py).

  python bench/quant_bench.py                                   # wide-random and wide-outlier
  python bench/quant_bench.py --checkpoints tiny-random tiny-outlier --schemes per-tensor cpu_int8 w8a32 --out /tmp/p.md

Builds land in --work (kept, so a rerun only times); the page names the CPU and its instruction sets.
"""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codes.checks.quant_bench import SCHEMES, measure, page  # noqa: E402  (the checkout's library, as a script)
from codes.checks.results_page import bench_parser, machine, write_page # noqa: E402
from codes.common.errors import run_cli  # noqa: E402


def main(argv=None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--checkpoints", nargs="+", default=["wide-random", "wide-outlier"],
                   help="checkpoint folders or generated names (default: %(default)s)")
    p.add_argument("--schemes", nargs="+", default=list(SCHEMES), help=f"which (default: all of {', '.join(SCHEMES)})")
    p.add_argument("--work", type=Path, default=ROOT / "models" / "quant-bench", help="where the builds go")
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--rounds", type=int, default=3, help="timing rounds, the schemes taking turns (default 3)")
    p.add_argument("--steps", type=int, default=4, help="decoding steps a timed run (default 4)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "quant_results.md", help="the page to write")
    args = p.parse_args(argv)
    data = measure(args.checkpoints, args.schemes, args.work, args.threads, args.rounds, args.steps)
    data["command"] = "python bench/quant_bench.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    info = machine()
    write_page(args.out, page(data, info), {**data, "machine": info})
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
