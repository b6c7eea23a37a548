#!/usr/bin/env python3
"""Check a build against upstream PyTorch: numbers (equiv), decisions (fidelity) and speed (rtf).

  python eval.py --mode equiv --model_dir models/omnivoice-cpu-fp32
  python eval.py --mode fidelity --model_dir models/omnivoice-cpu_int8                  # against upstream fp32
  python eval.py --mode fidelity --model_dir models/omnivoice-cpu_int8 --reference models/omnivoice-cpu_fp32
  python eval.py --mode equiv --model_dir some/foreign/folder      # probe only: is it bidirectional?
  python eval.py --mode rtf --model_dir models/full-cpu_int8 --compare models/full-cpu_fp32 \
      --torch full-random --torch-dtype fp32 bf16 --out bench/results
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from codes.common.errors import run_cli
from codes.common.quiet import library_output, set_verbose
from codes.export.fidelity import DEFAULT_STEPS as FIDELITY_STEPS


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("equiv", "fidelity", "rtf"), default="equiv")
    parser.add_argument("--model_dir", type=Path,
                        help="a build folder from optimize.py, or a foreign one (default: models/omnivoice-cpu)")
    parser.add_argument("--higgs_dir", type=Path,
                        help="a codec folder or a build holding one, for model folders that have none "
                             "(default: the model folder's, else models/higgs-fp16)")
    parser.add_argument("--backbone", type=Path,
                        help="a bidirectional backbone graph (.onnx) to use instead of the model folder's")
    parser.add_argument("--source", help="equiv, fidelity: the checkpoint the build came from (default: the one its "
                                         "manifest names)")
    parser.add_argument("--asr_dir", type=Path,
                        help="equiv: a recogniser folder or a build holding one, checked too (default: the model "
                             "folder's, if it has one)")
    parser.add_argument("--asr_source",
                        help="equiv: the Whisper checkpoint the recogniser came from (default: the one its manifest names)")
    parser.add_argument("--provider", choices=("cpu", "cuda"), help="default: the build's (see inference.py)")
    parser.add_argument("--verbose", action="store_true", help="show the libraries' own warnings and logs")
    fidelity = parser.add_argument_group("fidelity")
    fidelity.add_argument("--reference", default="upstream",
                          help="what the build is held to: upstream (fp32 PyTorch on its checkpoint) or another "
                               "build's folder, such as a cpu_fp32 build (default: %(default)s)")
    fidelity.add_argument("--fidelity-steps", type=int, default=FIDELITY_STEPS,
                          help="teacher-forced decoding steps compared (default: %(default)s)")
    rtf = parser.add_argument_group("rtf")
    rtf.add_argument("--compare", type=Path, nargs="*", default=[], help="other builds timed in the same run")
    rtf.add_argument("--torch", help="also time upstream PyTorch on this checkpoint (folder, hub id, full-random)")
    rtf.add_argument("--torch-dtype", nargs="+", default=["fp32"], choices=("fp32", "bf16"))
    rtf.add_argument("--workload", default="default", choices=("default", "10s", "smoke"),
                     help="default: 10 s, 3 s and a batch of 4; 10s: the 10 s utterance alone; smoke: CI")
    rtf.add_argument("--num_steps", "--num-step", dest="num_steps", type=int,
                     help="override the workload's 32 decoding steps (s/step is unchanged)")
    rtf.add_argument("--repeats", type=int, default=3)
    rtf.add_argument("--warmup", type=int, default=1)
    rtf.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for every engine (default: all)")
    rtf.add_argument("--no-memory", action="store_true", help="skip the per-build peak-memory runs")
    rtf.add_argument("--no-profile", action="store_true", help="skip the per-op profile of the first build's step")
    rtf.add_argument("--step-batches", type=int, nargs="*", default=[],
                     help="also time one decoding step of the first build at these batch sizes, run each way "
                          "(numpy, graph, device: s/step and the host's share)")
    rtf.add_argument("--out", type=Path, default=Path("bench/results"), help="writes OUT.md and OUT.json")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.command = "python eval.py " + " ".join(map(str, sys.argv[1:] if argv is None else argv))
    from codes.runtime.contract.manifest import find_builds

    args.model_dir, args.higgs_dir = find_builds(args.model_dir, args.higgs_dir)
    if args.mode == "rtf":
        return rtf(args)
    if args.mode == "fidelity":
        return fidelity(args)
    from codes.checks.equiv import run_equivalence

    set_verbose(args.verbose)
    with library_output("the comparison with upstream"):  # upstream's imports and loaders warn and log
        rows, table = run_equivalence(args.model_dir, args.source, args.provider, args.higgs_dir, args.backbone,
                                      args.asr_dir, args.asr_source)
    print(table)
    failed = [r.check for r in rows if not r.passed]
    if failed:
        print(f"FAILED: {', '.join(failed)}")
        return 1
    print("all checks passed")
    return 0


def fidelity(args) -> int:
    from codes.export.fidelity import run_fidelity

    set_verbose(args.verbose)
    with library_output("the fidelity run"):
        report = run_fidelity(args.model_dir, args.reference, args.source, args.fidelity_steps, provider=args.provider)
    print(f"{args.model_dir} against {report.reference}")
    print(report.table())
    print(report.one_line())
    return 0


def rtf(args) -> int:
    from codes.checks.bench import BenchRequest, benchmark, markdown
    from codes.export.checkpoint import resolve_checkpoint

    torch_ckpt = resolve_checkpoint(args.torch).path if args.torch else None
    request = BenchRequest(
        model_dirs=[args.model_dir, *args.compare], torch_checkpoint=torch_ckpt, torch_dtypes=args.torch_dtype,
        higgs_dir=args.higgs_dir, backbone=args.backbone, provider=args.provider,
        workload=args.workload, num_steps=args.num_steps, repeats=args.repeats, warmup=args.warmup, threads=args.threads,
        memory=not args.no_memory, profile=not args.no_profile, step_batches=args.step_batches, out=args.out, command=args.command,
    )
    report = benchmark(request, log=lambda line: print(line, file=sys.stderr))
    print(markdown(report))
    print(f"wrote {args.out.with_suffix('.md')} and {args.out.with_suffix('.json')}")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
