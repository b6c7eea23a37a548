#!/usr/bin/env python3
"""Build an OmniVoice checkpoint into ONNX sub-models plus omnivoice_manifest.json.

  python optimize.py --model tiny-random --device cpu
  python optimize.py --model /path/to/OmniVoice --device cpu_fp32 --include-higgs
  python optimize.py --model k2-fsa/OmniVoice --higgs-only --output models/higgs-fp16
  python optimize.py --model /path/to/OmniVoice --device cpu_int8 --include-asr   # + Whisper, to clone from a clip alone
  python optimize.py --model /path/to/OmniVoice --device cpu_int8 --include-aligner --aligner-model openai/whisper-base
  python optimize.py --model k2-fsa/OmniVoice --lora exp/omnivoice_lora/checkpoint-500 --device cpu_int8   # fine-tuned

Every quantized build prints its fidelity against upstream fp32 and records it in the manifest
(eval.py --mode fidelity measures it again, against upstream or another build).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from codes.export.asr_build import DEFAULT_ASR_MODEL, PRECISIONS as ASR_PRECISIONS, parse_heads
from codes.export.checkpoint import DEFAULT_HUB_ID
from codes.common.errors import run_cli
from codes.common.quiet import set_verbose
from codes.export.profiles import PROFILES


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=DEFAULT_HUB_ID,
                        help="checkpoint folder in upstream's layout, a hub id already in the local "
                             "Hugging Face cache, or a generated one: tiny-random, full-random, wide-random, or "
                             "tiny-/wide-/full-outlier (with outlier channels) (default: %(default)s)")
    parser.add_argument("--device", default="cpu",
                        help=f"build profile: {', '.join(f'{k} ({p.description})' for k, p in PROFILES.items())}")
    parser.add_argument("--output", type=Path,
                        help="output folder (default: models/omnivoice-<profile>; with --higgs-only "
                             "models/higgs-<precision>, with --asr-only models/asr-<precision>)")
    parser.add_argument("--llm-export", choices=("genai", "torch"),
                        help="how the backbone is exported (default: the profile's, see docs/build.md)")
    parser.add_argument("--include-higgs", action="store_true", help="also build the Higgs codec into <output>/audio_tokenizer")
    parser.add_argument("--higgs-only", action="store_true", help="build only the Higgs codec")
    parser.add_argument("--higgs-precision", choices=("fp16", "fp32"),
                        help="codec precision (default: the profile's, fp16; never int4)")
    parser.add_argument("--include-asr", action="store_true",
                        help="also build the recogniser (Whisper) into <output>/asr, so a clip clones without its transcript")
    parser.add_argument("--asr-only", action="store_true", help="build only the recogniser")
    parser.add_argument("--asr-model", default=DEFAULT_ASR_MODEL,
                        help="the Whisper checkpoint: a folder, a hub id already in the local Hugging Face cache, "
                             "or tiny-whisper (default: %(default)s)")
    parser.add_argument("--asr-precision", choices=ASR_PRECISIONS,
                        help="recogniser precision (default: the profile's: int8 on the CPU profiles, fp32 for "
                             "cpu_fp32, fp16 for gpu)")
    parser.add_argument("--include-aligner", action="store_true",
                        help="also build an aligner (a Whisper that times words) into <output>/aligner, which word "
                             "timings use instead of the recogniser")
    parser.add_argument("--aligner-only", action="store_true",
                        help="build only the aligner (into an existing build's folder, say: the rest is kept)")
    parser.add_argument("--aligner-model",
                        help="the aligner's Whisper checkpoint: a folder, a hub id already in the local Hugging Face "
                             "cache, or tiny-whisper; base or small for speed (docs/build.md)")
    parser.add_argument("--aligner-precision", choices=ASR_PRECISIONS, default="fp32",
                        help="aligner precision (default: %(default)s, whose word times equal openai-whisper's)")
    parser.add_argument("--aligner-heads", type=parse_heads,
                        help="the aligner's alignment heads as LAYER:HEAD pairs, for a checkpoint whose "
                             "generation_config names none")
    parser.add_argument("--lora", type=Path,
                        help="a LoRA adapter folder from upstream's fine-tuning (adapter_config.json, "
                             "adapter_model.safetensors), merged into --model before export")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace files in --output that no omnivoice-onnx build wrote (a build's own files "
                             "are always replaced; nothing else in the folder is touched)")
    parser.add_argument("--verbose", action="store_true", help="show every library's warnings and logs")
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    set_verbose(args.verbose)
    from codes.export.build import BuildRequest, build, resolve_inputs
    from codes.export.profiles import get_profile

    request = BuildRequest(checkpoint=None, profile=get_profile(args.device), output=args.output,
                           llm_export=args.llm_export, include_higgs=args.include_higgs, higgs_only=args.higgs_only,
                           higgs_precision=args.higgs_precision, include_asr=args.include_asr, asr_only=args.asr_only,
                           asr_model=args.asr_model, asr_precision=args.asr_precision, overwrite=args.overwrite,
                           lora=args.lora, include_aligner=args.include_aligner, aligner_model=args.aligner_model,
                           aligner_precision=args.aligner_precision, aligner_heads=args.aligner_heads,
                           aligner_only=args.aligner_only)
    resolve_inputs(request, args.model)
    build(request)
    total = sum(request.timings.values())
    print(f"built {request.output} ({request.summary()}) in {total:.1f}s: "
          + ", ".join(f"{k} {v:.1f}s" for k, v in request.timings.items()))
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
