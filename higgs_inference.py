"""Round trip through the Higgs Audio V2 codec with ONNX Runtime alone (no torch).

  python higgs_inference.py --models-dir models/higgs-fp16 --input in.wav --output rt.wav
  python higgs_inference.py --models-dir DIR --input in.wav --codes_out codes.npy   # encode only
  python higgs_inference.py --models-dir DIR --codes_in codes.npy --output out.wav  # decode only

--models-dir is a codec folder (a build's audio_tokenizer/) or any build that holds one:
a backbone build made with --include-higgs, or a codec-only build (optimize.py --higgs-only).
Any sample rate and channel count goes in; codes are int64 [8, frames] in 0..1023.
"""

from __future__ import annotations

import argparse
import sys
import time

from codes.common.errors import UserError, run_cli


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models-dir", "--models_dir", dest="models_dir", required=True,
                        help="a codec folder (audio_tokenizer/) or a build that holds one")
    parser.add_argument("--input", help="audio file to encode (any rate, any channels)")
    parser.add_argument("--codes_in", "--codes-in", dest="codes_in", help="codes .npy to decode instead of --input")
    parser.add_argument("--output", help="where to write the decoded audio (.wav, .flac, .ogg)")
    parser.add_argument("--codes_out", "--codes-out", dest="codes_out", help="where to write the codes (.npy)")
    parser.add_argument("--provider", choices=("cpu", "cuda"), help="execution provider (default: the build's)")
    parser.add_argument("--threads", type=int, default=None, help="intra-op threads (default: ORT's choice)")
    return parser.parse_args()


def main() -> int:
    args = parse_args()
    from codes.runtime.audio.codec import HiggsCodec
    from codes.runtime.audio.outputs import check_audio_output_path, check_output_path, load_codes, save_codes, write_audio
    from codes.runtime.audio.processing import read_audio
    from codes.runtime.contract.manifest import read_manifest
    from codes.runtime.contract.sessions import providers_for, resolve_provider

    if bool(args.input) == bool(args.codes_in):
        raise UserError("give exactly one of --input (audio to encode) and --codes_in (codes to decode)")
    if not (args.output or args.codes_out):
        raise UserError("nothing to write: give --output (audio) and/or --codes_out (codes)")
    if args.codes_in and args.codes_out:
        raise UserError("--codes_in with --codes_out would only copy the codes; give --output instead")
    if args.output:
        check_audio_output_path(args.output)
    if args.codes_out:
        check_output_path(args.codes_out, "codes output")

    manifest = read_manifest(args.models_dir)
    folder, section = manifest.codec()
    provider = resolve_provider(args.provider, manifest.data.get("execution_provider"))
    codec = HiggsCodec(folder, section, providers=providers_for(provider), threads=args.threads)

    started = time.perf_counter()
    if args.input:
        wav, sample_rate = read_audio(args.input)
        codes = codec.encode(wav, sample_rate)
        source = f"{args.input} ({wav.shape[0]} ch, {sample_rate} Hz, {wav.shape[-1] / sample_rate:.2f} s)"
    else:
        codes = codec.check_codes(load_codes(args.codes_in))  # [8, T] comes back as [1, 8, T]
        if codes.shape[0] != 1:
            raise UserError(f"{args.codes_in} holds {codes.shape[0]} clips; this tool decodes one [8, frames] array")
        codes = codes[0]
        source = args.codes_in
    audio = codec.decode(codes) if args.output else None
    seconds = time.perf_counter() - started

    # Everything is computed before anything is written: a failure leaves no partial output.
    if args.codes_out:
        save_codes(args.codes_out, codes)
    if args.output:
        write_audio(args.output, audio, codec.sample_rate)
    written = ", ".join(p for p in (args.codes_out, args.output) if p)
    print(f"{source} -> {codes.shape[1]} frames x {codes.shape[0]} codebooks -> {written} ({seconds:.2f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
