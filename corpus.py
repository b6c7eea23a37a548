#!/usr/bin/env python3
"""Speak a whole corpus with an omnivoice-onnx build on Ray Data: resumable, every row accounted for.

  python corpus.py --model_dir models/omnivoice-cpu --input lines.jsonl --output out/
  python corpus.py --model_dir DIR --input lines.parquet --output out/ --address ray://head:10001
  python corpus.py --model DIR --test_list test.jsonl --res_dir results/      # upstream's omnivoice-infer-batch

Rows: id (unique, names the audio file), text, and optionally language (or upstream's language_id),
instruct, voice (a voice file from inference.py --save_voice), ref_audio (+ ref_text: without it, the build's
recogniser transcribes the clip), duration, speed, seed;
language_name is accepted and left to reports, as upstream does. Audio goes to OUT/audio/<id>.<format>
(with --res_dir, upstream's layout: RES_DIR/<id>.wav), one record per row to results.parquet and
results.jsonl beside it; running
the same command again skips what is done and redoes what failed or is missing, except a row that
took its actor down (a crash): that one is skipped until --retry-failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codes.common.errors import run_cli
from codes.runtime.contract.settings import add_generation_flags, settings_from_flags

DEFAULT_BATCH_SIZE = 4
UPSTREAM_BATCH_SECONDS = 1000.0  # omnivoice-infer-batch's --batch_duration default


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", "--model", dest="model_dir", type=Path,
                   help="a build folder from optimize.py (default: models/omnivoice-cpu)")
    p.add_argument("--higgs_dir", type=Path, help="a codec folder or a build holding one (default: the model folder's)")
    p.add_argument("--asr_dir", type=Path, help="a recogniser folder or a build holding one, for rows whose ref_audio "
                                               "comes without ref_text (default: the model folder's, if any)")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", help="a .jsonl, .parquet or .csv file of rows, or a folder of them")
    source.add_argument("--test_list", help="upstream's test list (JSONL: id, text, ref_audio, ref_text, instruct, "
                                            "language_id, language_name, duration, speed), as --input")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--output", type=Path, help="the corpus folder: audio/, results.parquet, .jsonl")
    target.add_argument("--res_dir", type=Path, help="as --output, with upstream's layout: RES_DIR/<id>.wav "
                                                     "beside the results")
    p.add_argument("--lang_id", help="every row's language, whatever the row says (upstream's --lang_id)")
    p.add_argument("--normalize_text", action="store_true",
                   help="numbers, dates, currency, times and units into words first (upstream's normalize_text)")
    p.add_argument("--address", help="join this Ray cluster (e.g. ray://head:10001 or auto); default: a local Ray")
    p.add_argument("--actors", type=int, help="actors, each holding one model (default: CPUs / --threads-per-actor)")
    p.add_argument("--threads-per-actor", type=int, default=1, help="ONNX Runtime threads (and Ray CPUs) per actor")
    p.add_argument("--batch-size", "--batch_size", dest="batch_size", type=int,
                   help="rows of similar length handed to an actor at a time (default 4; a killed run loses at most "
                        "these); 0, as upstream: batches of --batch_duration seconds")
    p.add_argument("--batch_duration", type=float,
                   help="batches of at most this many estimated seconds (reference + speech) instead of "
                        "--batch-size rows, as upstream's omnivoice-infer-batch (its default: 1000)")
    p.add_argument("--provider", choices=("cpu", "cuda"), help="execution provider (default: the build's)")
    p.add_argument("--gpus-per-actor", type=float, help="GPUs per actor (default: 1 with --provider cuda, else 0)")
    p.add_argument("--format", choices=("wav", "flac"), default="wav", help="audio files: 16-bit WAV or FLAC")
    p.add_argument("--seed", type=int, default=0, help="a row without a seed gets one from its id and this")
    p.add_argument("--retry-failed", action="store_true",
                   help="speak again the rows whose actor died on them in an earlier run (skipped by default: "
                        "the same row would likely take the next actor down too)")
    add_generation_flags(p)
    p.add_argument("--verbose", action="store_true", help="show Ray's own logs")
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    from codes.corpus.run import CorpusOptions, Interrupted, RunFailed, run_corpus

    settings = settings_from_flags(args)
    # As upstream: a fixed --batch_size wins, 0 means by duration (its default 1000 s); ours: 4 rows unless
    # only --batch_duration is given.
    batch_size, batch_duration = args.batch_size, args.batch_duration
    if batch_size == 0:
        batch_size, batch_duration = DEFAULT_BATCH_SIZE, batch_duration or UPSTREAM_BATCH_SECONDS
    elif batch_size is not None:
        batch_duration = None
    else:
        batch_size = DEFAULT_BATCH_SIZE
    options = CorpusOptions(
        input=args.input or args.test_list, output=args.output or args.res_dir, model_dir=args.model_dir,
        higgs_dir=args.higgs_dir, asr_dir=args.asr_dir, audio_dir="" if args.res_dir else "audio", lang_id=args.lang_id,
        normalize_text=args.normalize_text, batch_duration=batch_duration,
        address=args.address, actors=args.actors, threads_per_actor=args.threads_per_actor,
        batch_size=batch_size, provider=args.provider, gpus_per_actor=args.gpus_per_actor,
        audio_format=args.format, seed=args.seed, settings=settings, verbose=args.verbose,
        retry_failed=args.retry_failed,
    )
    try:
        summary = run_corpus(options)
    except RunFailed as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    except Interrupted as exc:
        print(f"error: interrupted; {_count(exc.spoken, 'row')} spoken so far kept, run the same command again "
              "to resume", file=sys.stderr)
        return 130

    s = summary
    print(f"{s.rows} rows: {s.spoken} spoken, {s.failed} failed, {s.skipped} skipped (done before)"
          + (f", {s.warned} with warnings" if s.warned else ""))
    if s.crashed_before:
        print(f"{_count(s.crashed_before, 'row')} that took an actor down before not spoken again "
              "(--retry-failed tries them)")
    if not s.actors:
        print("nothing to speak: no actor started")
    else:
        rate = s.audio_seconds / max(s.synthesis_wall_seconds, 1e-9)
        layout = f"{_count(s.actors, 'actor')} x {_count(s.threads_per_actor, 'thread')}"
        print(f"spoke {s.audio_seconds:.1f} s ({s.audio_seconds / 3600:.3f} h) of audio in "
              f"{s.synthesis_wall_seconds:.1f} s: {rate:.2f} audio seconds per second ({layout})")
    print(f"the corpus holds {s.corpus_audio_seconds / 3600:.3f} h of audio; results in {s.results} (and .jsonl)")
    for line in s.errors:
        print(f"  failed {line}")
    if s.failed > len(s.errors):
        print(f"  ... {s.failed - len(s.errors)} more failed rows in the results")
    return 0


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


if __name__ == "__main__":
    sys.exit(run_cli(main))
