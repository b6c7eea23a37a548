#!/usr/bin/env python3
"""Word timings' cost on a full-size recogniser, their share of a 10 s utterance, and their agreement with
openai-whisper's find_alignment on the same weights (the code: codes/checks/words.py).

  optimize.py --model full-random --device cpu_int8 --include-higgs --include-asr --asr-model full-whisper \
      --output models/full-cpu_int8-asr                      # backbone, codec and the int8 recogniser
  optimize.py --asr-only --asr-model full-whisper --asr-precision fp32 --output models/asr-full-fp32
  flock /work/heavy.lock .venv/bin/python bench/words_bench.py --recogniser models/full-cpu_int8-asr \
      models/asr-full-fp32 --source full-whisper --model_dir models/full-cpu_int8-asr --out bench/words_results.md
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
    parser.add_argument("--recogniser", type=Path, nargs="+", required=True,
                        help="recogniser folders (asr/) or builds holding one, each measured in turn")
    parser.add_argument("--source", help="the Whisper checkpoint they were built from, for the comparison with "
                                         "openai-whisper (a folder or full-whisper; none: no comparison)")
    parser.add_argument("--model_dir", type=Path, help="a build with a codec and a recogniser: the share of a 10 s "
                                                       "utterance's synthesis (none: not measured)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seconds", type=float, nargs="+", default=list(CLIP_SECONDS), help="clip lengths")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, help="the markdown page to write (its .json beside it)")
    args = parser.parse_args(argv)

    from codes.export.asr_build import resolve_whisper
    from codes.runtime.manifest import recogniser_folder

    recognisers = {str(path): recogniser_folder(path) for path in args.recogniser}
    source = resolve_whisper(args.source) if args.source else None
    command = "python bench/words_bench.py " + " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:]))
    report = run(recognisers, source, args.model_dir, args.threads, tuple(args.seconds), args.repeats, command)
    report["notes"] = NOTES
    write_page(args.out, page(report), report)
    return 0


NOTES = [
    "## Reading it", "",
    "- The encoder reads one whole 30 s window for every window, however short the clip: a 2 s sentence costs",
    "  about what a 30 s one does, so aligning sentence by sentence pays one encoder pass per sentence.",
    "- Random weights put the words anywhere (all of a long clip's text in its first window, often); a",
    "  trained checkpoint's clip over 30 s reads two windows or more, each an encoder pass and two decoder",
    "  passes (the first pass finds where the window ends).",
    "- First audio with and without word timings through the WebSocket door is not measured here: the doors",
    "  are being refactored, and the door work (timing events with words) comes after.",
]


if __name__ == "__main__":
    sys.exit(run_cli(main))
