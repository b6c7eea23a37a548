#!/usr/bin/env python3
"""Word timings' cost for each aligner (a Whisper size in a precision), their share of a 10 s utterance, and
their agreement with openai-whisper's find_alignment on the same weights (the code: codes/checks/words.py).

  for size in base small; do for p in fp32 int8; do
    optimize.py --aligner-only --aligner-model $size-whisper --aligner-precision $p --output models/aligner-$size-$p
  done; done
  .venv/bin/python bench/words_bench.py --aligner models/aligner-{base,small}-{fp32,int8}/aligner --compare \
      --out bench/words_results.md
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codes.checks.results_page import bench_parser, write_page  # noqa: E402
from codes.checks.words import CLIP_SECONDS, page, run  # noqa: E402
from codes.common.errors import run_cli  # noqa: E402


def main(argv=None) -> int:
    parser = bench_parser(__doc__)
    parser.add_argument("--aligner", "--recogniser", type=Path, nargs="+", required=True,
                        help="aligner or recogniser folders (aligner/, asr/), or builds holding one, each measured in turn")
    parser.add_argument("--compare", action="store_true",
                        help="also hold each to openai-whisper's find_alignment on the checkpoint it was built from")
    parser.add_argument("--model_dir", type=Path, help="a build with a codec and word timings: the share of a 10 s "
                                                       "utterance's synthesis (none: not measured)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, nargs="+", default=list(CLIP_SECONDS), help="clip lengths")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="the markdown page to write (its .json beside it)")
    args = parser.parse_args(argv)

    from codes.runtime.contract.manifest import read_manifest, recogniser_folder

    def folder_of(path: Path) -> Path:
        if (path / "asr_manifest.json").is_file():
            return path
        manifest = read_manifest(path)
        return manifest.aligner_folder() if manifest.aligner else recogniser_folder(path)

    aligners = {str(path): folder_of(path) for path in args.aligner}
    command = "python bench/words_bench.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    report = run(aligners, args.compare, args.model_dir, args.threads, tuple(args.seconds), args.repeats, command)
    report["notes"] = NOTES
    write_page(args.out, page(report), report)
    return 0


NOTES = [
    "## Reading it", "",
    "- The encoder reads one whole 30 s window for every window, however short the clip: a 2 s sentence costs",
    "  about what a 30 s one does. Pieces that share a window (Aligner.align_pieces: a script's captions, a",
    "  stream's waiting chunks) pay one encoder pass for it together.",
    "- Random weights put the words anywhere (all of a long clip's text in its first window, often); a",
    "  trained checkpoint's clip over 30 s reads two windows or more, each an encoder pass and two decoder",
    "  passes (the first pass finds where the window ends).",
]


if __name__ == "__main__":
    sys.exit(run_cli(main))
