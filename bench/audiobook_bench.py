#!/usr/bin/env python3
"""An audiobook: a book of about 10,000 words (written here) read into an M4B with chapter files and a
read-along EPUB; the wall time, RTF and peak memory, a kill and resume, and an edited paragraph
(codes/checks/audiobook_bench.py).

  python bench/audiobook_bench.py --model_dir models/full-cpu_int8 --num_steps 2 --work /tmp/audiobook
  python bench/audiobook_bench.py --model_dir models/tiny --words 600 --chapters 3 --out /tmp/page.md

Run it under `flock /work/heavy.lock` on a shared machine; the page names the CPU and its instruction sets.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codes.checks.audiobook_bench import markdown_page, run_benchmark  # noqa: E402
from codes.checks.results_page import bench_parser, write_page  # noqa: E402


def main(argv=None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--model_dir", type=Path, required=True, help="a build folder with its codec inside")
    p.add_argument("--work", type=Path, required=True, help="a new folder for the book and what is made of it")
    p.add_argument("--words", type=int, default=10_000, help="the book's length in words (default 10000)")
    p.add_argument("--chapters", type=int, default=10, help="its chapters (default 10)")
    p.add_argument("--num_steps", type=int, default=32, help="decoding steps a sentence (default 32)")
    p.add_argument("--threads", type=int, help="ONNX Runtime threads (default: all cores)")
    p.add_argument("--note", default="", help="a paragraph for the page, under the table")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "audiobook_results.md", help="the page to write")
    args = p.parse_args(argv)
    if args.work.exists():
        p.error(f"--work {args.work} exists; give a new folder (the bench writes only into one it made)")
    report = run_benchmark(args.model_dir, args.work, args.words, args.chapters, args.num_steps, args.threads)
    command = "python bench/audiobook_bench.py " + shlex.join(argv if argv is not None else sys.argv[1:])
    write_page(args.out, markdown_page(report, command, args.note), report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
