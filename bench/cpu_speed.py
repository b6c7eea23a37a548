#!/usr/bin/env python3
"""Our builds against upstream PyTorch as a user meets them, on this CPU (codes/checks/cpu_speed.py).

  python bench/cpu_speed.py --builds models/full-cpu_int8 --checkpoint full-random --out bench/cpu_speed_<isa>.md
  python bench/cpu_speed.py --builds OLD NEW --rounds 2          # two builds side by side, no torch
  git worktree add ../old 92ef807 && python bench/cpu_speed.py --builds OLD NEW --first_checkout ../old   # OLD as 92ef807 ran it
  python bench/cpu_speed.py --builds NEW --kernels avx2 onnx    # our CPU kernels at their widest, at 8 lanes (as on
                                                                # an AVX2-only CPU), and ONNX Runtime's own ops

Each build runs `inference.py` as a whole process; upstream's `generate` is timed alone, in fp32 and, where the
CPU multiplies bf16 natively, bf16; rounds interleave them. The page names the CPU and its instruction sets.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codes.checks.cpu_speed import measure, page  # noqa: E402  (the checkout's library, as a script)
from codes.checks.results_page import add_kernel_switches, bench_parser, kernel_switches, publish  # noqa: E402
from codes.common.errors import run_cli  # noqa: E402


def main(argv=None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--builds", type=Path, nargs="+", required=True, help="our builds; the first is the ratios' base")
    p.add_argument("--checkpoint", help="upstream's checkpoint: a folder or a generated name (none: ours only)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=10.0, help="the utterance's duration (default 10)")
    p.add_argument("--num_steps", type=int, default=32)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--work", type=Path, default=ROOT / "models" / "cpu-speed", help="where the WAVs go")
    p.add_argument("--first_checkout", type=Path,
                   help="run the first build with this checkout's inference.py (git worktree add DIR COMMIT): an "
                        "older commit's build as that commit ran it")
    add_kernel_switches(p, "each build this checkout runs")
    p.add_argument("--out", type=Path, help="the page to write (and its .json beside it)")
    args = p.parse_args(argv)

    def run() -> None:
        checkpoint = None
        if args.checkpoint:
            from codes.export.checkpoint import resolve_checkpoint

            checkpoint = resolve_checkpoint(args.checkpoint).path
        data = measure(args.builds, checkpoint, args.threads, args.seconds, args.num_steps, args.rounds, args.work,
                       first_checkout=args.first_checkout, switches=kernel_switches(args))
        data["checkpoint"] = args.checkpoint  # as named: a generated name, or the folder given
        publish(args.out, "bench/cpu_speed.py", argv, page, data)

    return run_cli(run)


if __name__ == "__main__":
    sys.exit(main())
