#!/usr/bin/env python3
"""Speak a whole corpus with an omnivoice-onnx build on Ray Data: resumable, every row accounted for.

  python corpus.py --model_dir models/omnivoice-cpu --input lines.jsonl --output out/
  python corpus.py --model_dir DIR --input lines.parquet --output out/ --address ray://head:10001

Rows: id (unique, names the audio file), text, and optionally language, instruct, voice (a .npz from
inference.py --save_voice), ref_audio + ref_text, duration, speed, seed. Audio goes to
OUT/audio/<id>.<format>, one record per row to OUT/results.parquet and OUT/results.jsonl; running
the same command again skips what is done and redoes what failed or is missing, except a row that
took its actor down (a crash): that one is skipped until --retry-failed.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codes.common.errors import run_cli
from codes.runtime.settings import add_generation_flags, settings_from_flags


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", type=Path, help="a build folder from optimize.py (default: models/omnivoice-cpu)")
    p.add_argument("--higgs_dir", type=Path, help="a codec folder or a build holding one (default: the model folder's)")
    p.add_argument("--input", required=True, help="a .jsonl, .parquet or .csv file of rows, or a folder of them")
    p.add_argument("--output", type=Path, required=True, help="the corpus folder: audio/, results.parquet, .jsonl")
    p.add_argument("--address", help="join this Ray cluster (e.g. ray://head:10001 or auto); default: a local Ray")
    p.add_argument("--actors", type=int, help="actors, each holding one model (default: CPUs / --threads-per-actor)")
    p.add_argument("--threads-per-actor", type=int, default=1, help="ONNX Runtime threads (and Ray CPUs) per actor")
    p.add_argument("--batch-size", type=int, default=4,
                   help="rows of similar length handed to an actor at a time (a killed run loses at most these)")
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
    options = CorpusOptions(
        input=args.input, output=args.output, model_dir=args.model_dir, higgs_dir=args.higgs_dir,
        address=args.address, actors=args.actors, threads_per_actor=args.threads_per_actor,
        batch_size=args.batch_size, provider=args.provider, gpus_per_actor=args.gpus_per_actor,
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
