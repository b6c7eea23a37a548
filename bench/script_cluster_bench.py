#!/usr/bin/env python3
"""A long SRT (200 cues) spoken on Ray actors by inference.py --script --ray: one actor against several, beside
the same command without Ray (codes/checks/script_cluster_bench.py).

  python bench/script_cluster_bench.py --model_dir models/full-cpu_int8 --num_steps 4
  python bench/script_cluster_bench.py --model_dir models/tiny --cues 20 --out /tmp/page.md
  python bench/script_cluster_bench.py --model_dir BUILD_WITH_ALIGNER --compare words --num_steps 4 \
      --out bench/caption_words_results.md

Run it under `flock /work/heavy.lock` on a shared machine; the page names the CPU and its instruction sets.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codes.checks.results_page import bench_parser, write_page # noqa: E402  (the checkout's library, run as a script)
from codes.checks.script_cluster_bench import COMPARISONS, markdown, run_benchmark  # noqa: E402


def main(argv=None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--model_dir", type=Path, required=True, help="a build folder")
    p.add_argument("--higgs_dir", type=Path, help="its codec, where the build has none inside")
    p.add_argument("--cues", type=int, default=200, help="cues in the SRT (default 200)")
    p.add_argument("--num_steps", type=int, default=32, help="decoding steps per cue (default 32)")
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="cores to use: the actors of the "
                                                                       "several-actor run (default: all)")
    p.add_argument("--compare", choices=COMPARISONS, default="ray",
                   help="ray: one actor, several, no Ray; words: without and with --caption_words (default: ray)")
    p.add_argument("--note", default="", help="a paragraph for the page, under the table")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "script_cluster_results.md", help="the page to write")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as work:
        report = run_benchmark(args.model_dir, args.higgs_dir, args.cues, args.num_steps, args.threads, Path(work),
                               compare=args.compare)
    command = "python bench/script_cluster_bench.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    write_page(args.out, markdown(report, command, args.note), report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
