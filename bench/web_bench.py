#!/usr/bin/env python3
"""The JavaScript runtime's speed and size beside the Python runtime's, on this host (codes/checks/web_bench.py).

  python bench/web_bench.py --tiny SITE_TINY --full SITE_FULL --out bench/web_results.md

Each web build speaks the same utterance through the Python runtime, Node (onnxruntime-node, and onnxruntime-web's
WASM) and Chromium (WASM, cross-origin isolated, and for the tiny build WebGPU on SwiftShader). The page names the CPU
and its instruction sets.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codes.checks.results_page import bench_parser, publish  # noqa: E402
from codes.checks.web_bench import RUNNERS, measure, page  # noqa: E402
from codes.common.errors import run_cli  # noqa: E402

TEXT = "The committee will meet again next Thursday to review the budget, the schedule, and the remaining open questions."


def main(argv=None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--tiny", type=Path, help="a web build of tiny-random (also run on WebGPU)")
    p.add_argument("--full", type=Path, help="a web build of a full-size checkpoint")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=10.0, help="the utterance's duration (default 10)")
    p.add_argument("--num_steps", type=int, default=32)
    p.add_argument("--full_seconds", type=float, help="the full-size build's duration (default --seconds)")
    p.add_argument("--full_steps", type=int, help="the full-size build's steps (default --num_steps)")
    p.add_argument("--runners", nargs="+", choices=RUNNERS, default=RUNNERS)
    p.add_argument("--out", type=Path, help="the page to write (and its .json beside it)")
    args = p.parse_args(argv)

    def run() -> None:
        builds, workloads = [], {}
        for label, folder, small in (("tiny", args.tiny, True), ("full-size", args.full, False)):
            if folder is None:
                continue
            builds.append((label, folder, small))
            full = label == "full-size"
            workloads[label] = {"text": TEXT, "threads": args.threads,
                                "duration": (args.full_seconds if full and args.full_seconds else args.seconds),
                                "num_steps": (args.full_steps if full and args.full_steps else args.num_steps)}
        data = measure(builds, workloads, args.runners)
        publish(args.out, "bench/web_bench.py", argv, page, data)

    return run_cli(run)


if __name__ == "__main__":
    sys.exit(main())
