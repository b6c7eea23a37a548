#!/usr/bin/env python3
"""First audio through the stream door with and without word timings, on a build whose recogniser aligns.

  .venv/bin/python bench/words_first_audio.py --model_dir BUILD --out bench/words_first_audio_tiny.md

The figures and the method: codes/checks/words_first_audio.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from codes.checks.results_page import bench_parser  # noqa: E402
from codes.checks.words_first_audio import run  # noqa: E402


def main() -> None:
    p = bench_parser(__doc__)
    p.add_argument("--model_dir", type=Path, required=True, help="a build with a recogniser made with word timings")
    p.add_argument("--num_steps", type=int, default=32, help="decoding steps of each reply")
    p.add_argument("--rounds", type=int, default=3, help="replies of each kind, interleaved")
    p.add_argument("--threads", type=int, help="the server's ONNX Runtime threads (default: all cores)")
    p.add_argument("--out", type=Path, help="the results page (.md; a .json beside it)")
    args = p.parse_args()
    run(args.model_dir, args.num_steps, args.rounds, args.threads, args.out)


if __name__ == "__main__":
    main()
