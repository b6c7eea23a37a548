#!/usr/bin/env python3
"""Build an OmniVoice checkpoint into ONNX sub-models plus omnivoice_manifest.json.

  python optimize.py --model tiny-random --device cpu
  python optimize.py --model /path/to/OmniVoice --device cpu_fp32 --include-higgs
  python optimize.py --model k2-fsa/OmniVoice --higgs-only --output models/higgs-fp16
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codes.export.checkpoint import DEFAULT_HUB_ID
from codes.common.errors import run_cli
from codes.common.quiet import set_verbose
from codes.export.profiles import PROFILES


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_HUB_ID,
                        help="checkpoint folder in upstream's layout, a hub id already in the local "
                             "Hugging Face cache, tiny-random or full-random (default: %(default)s)")
    parser.add_argument("--device", default="cpu",
                        help=f"build profile: {', '.join(f'{k} ({p.description})' for k, p in PROFILES.items())}")
    parser.add_argument("--output", type=Path,
                        help="output folder (default: models/omnivoice-<profile>; with --higgs-only models/higgs-<precision>)")
    parser.add_argument("--llm-export", choices=("genai", "torch"),
                        help="how the backbone is exported (default: the profile's, see docs/build.md)")
    parser.add_argument("--include-higgs", action="store_true", help="also build the Higgs codec into <output>/audio_tokenizer")
    parser.add_argument("--higgs-only", action="store_true", help="build only the Higgs codec")
    parser.add_argument("--higgs-precision", choices=("fp16", "fp32"),
                        help="codec precision (default: the profile's, fp16; never int4)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace files in --output that no omnivoice-onnx build wrote (a build's own files "
                             "are always replaced; nothing else in the folder is touched)")
    parser.add_argument("--verbose", action="store_true", help="show every library's warnings and logs")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    set_verbose(args.verbose)
    from codes.export.build import BuildRequest, build
    from codes.export.checkpoint import resolve_checkpoint
    from codes.export.profiles import get_profile
    from codes.runtime.manifest import default_build_dir, default_codec_dir

    profile = get_profile(args.device).with_codec(args.higgs_precision)
    codec_precision = profile.precision["codec"]
    output = args.output or (default_codec_dir(codec_precision) if args.higgs_only else default_build_dir(profile.name))
    checkpoint = resolve_checkpoint(args.model, need_backbone=not args.higgs_only,
                                    need_higgs=args.include_higgs or args.higgs_only)
    request = BuildRequest(checkpoint=checkpoint, profile=profile, output=output, llm_export=args.llm_export,
                           include_higgs=args.include_higgs, higgs_only=args.higgs_only,
                           higgs_precision=args.higgs_precision, overwrite=args.overwrite)
    build(request)
    total = sum(request.timings.values())
    what = f"codec only, {codec_precision}" if args.higgs_only else profile.name
    print(f"built {output} ({what}) in {total:.1f}s: "
          + ", ".join(f"{k} {v:.1f}s" for k, v in request.timings.items()))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
