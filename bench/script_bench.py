#!/usr/bin/env python3
"""Scripts: a three-minute two-speaker dialogue and a 40-cue SRT, their segments batched in the step engine
against one at a time: wall time, RTF, decoding steps and peak memory (codes/checks/script_bench.py).

  python bench/script_bench.py --model_dir models/full-cpu_int8 --higgs_dir models/full-higgs --num_steps 8
  python bench/script_bench.py --model_dir models/tiny --workloads dialogue --num_steps 4 --out /tmp/page.md

Run it under `flock /work/heavy.lock` on a shared machine; the page names the CPU and its instruction sets.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codes.checks.results_page import bench_parser, write_page  # noqa: E402
from codes.checks.script_bench import WORKLOADS, markdown, run_benchmark  # noqa: E402


def main(argv=None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--model_dir", type=Path, required=True, help="a build folder")
    p.add_argument("--higgs_dir", type=Path, help="its codec, where the build has none inside")
    p.add_argument("--workloads", nargs="+", choices=list(WORKLOADS), default=list(WORKLOADS))
    p.add_argument("--max_batch", type=int, default=8, help="the batched mode's max batch (default 8)")
    p.add_argument("--num_steps", type=int, default=32, help="decoding steps per segment (default 32)")
    p.add_argument("--threads", type=int, help="ONNX Runtime threads (default: all cores)")
    p.add_argument("--repeats", type=int, default=1, help="runs of each mode, interleaved; the best is kept")
    p.add_argument("--note", default="", help="a paragraph for the page, under the table")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "script_results.md", help="the page to write")
    args = p.parse_args(argv)
    workloads = [WORKLOADS[name]() for name in args.workloads]
    report = run_benchmark(args.model_dir, args.higgs_dir, workloads, args.max_batch, args.num_steps,
                           args.threads, args.repeats)
    command = "python bench/script_bench.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    write_page(args.out, markdown(report, command, args.note), report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
