"""Transcription speed and peak memory of the ONNX recogniser on a full-size random Whisper-large-v3-turbo.

    .venv/bin/python bench/asr_bench.py                      # full-whisper, fp32 int8 fp16, 2 threads
    .venv/bin/python bench/asr_bench.py --precisions int8 --model tiny-whisper

Each precision is built once into --work (kept between runs), then measured in its own process so
its peak resident memory (loading included) is its own. Random weights decide how many tokens a
clip decodes to, so the tokens generated are reported next to each time, with the encoder's share
(one 30 s window, whatever the clip's length) and the cost of each token of the 5-beam search.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

CLIP_SECONDS = (3, 10, 20)
MEASURE = """
import json, resource, sys, time
from codes.export.generated_higgs import speech_like_signal
from codes.runtime.recognition.asr import Recogniser
folder, threads, seconds = sys.argv[1], int(sys.argv[2]), [float(s) for s in sys.argv[3].split(",")]
start = time.perf_counter()
recogniser = Recogniser(folder, threads=threads)
rows = {"load_s": time.perf_counter() - start, "clips": []}
recogniser.transcribe(speech_like_signal(1.0, 24000, seed=99), 24000)  # first-run allocations out of the timings
for i, s in enumerate(seconds):
    wav = speech_like_signal(s, 24000, seed=i + 1)
    start = time.perf_counter()
    text = recogniser.transcribe(wav, 24000)
    elapsed = time.perf_counter() - start
    features = recogniser.features_of(wav, 24000)
    start = time.perf_counter()
    recogniser._encode(features)
    encoder_s = time.perf_counter() - start
    tokens = recogniser.last_token_count
    rows["clips"].append({"seconds": s, "time_s": elapsed, "tokens": tokens, "encoder_s": encoder_s,
                          "per_token_ms": 1000 * (elapsed - encoder_s) / max(tokens, 1), "text": text[:40]})
rows["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(rows))
"""


def cpu_isa() -> dict:
    flags, model = set(), ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("flags") and not flags:
            flags = set(line.split(":", 1)[1].split())
        elif line.startswith("model name") and not model:
            model = line.split(":", 1)[1].strip()
    wanted = sorted(f for f in flags if f in ("avx2", "fma", "f16c") or f.startswith(("avx512", "amx", "avx_vnni")))
    return {"cpu": model, "isa": wanted, "machine": platform.machine()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="full-whisper", help="Whisper checkpoint (folder, cached hub id, generated)")
    parser.add_argument("--precisions", nargs="+", default=["fp32", "int8", "fp16"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--work", type=Path, default=REPO_ROOT / "models" / "asr-bench")
    parser.add_argument("--json", type=Path, default=REPO_ROOT / "bench" / "asr_results.json")
    args = parser.parse_args()

    results = {**cpu_isa(), "model": args.model, "threads": args.threads, "runs": {}}
    for precision in args.precisions:
        folder = args.work / f"{args.model}-{precision}" / "asr"
        if not (folder / "asr_manifest.json").is_file():
            start = time.perf_counter()
            # A build in its own process, so the exporter's memory is gone before the measurement.
            subprocess.run([sys.executable, "-c", "import sys; from codes.export.asr_build import build_asr; "
                            "build_asr(sys.argv[1], sys.argv[2], sys.argv[3])", args.model, str(folder.parent),
                            precision], cwd=REPO_ROOT, check=True)
            print(f"{precision}: built in {time.perf_counter() - start:.0f} s", flush=True)
        load_before = os.getloadavg()[0]
        done = subprocess.run([sys.executable, "-c", MEASURE, str(folder), str(args.threads),
                               ",".join(str(s) for s in CLIP_SECONDS)], cwd=REPO_ROOT, capture_output=True, text=True)
        if done.returncode != 0:
            results["runs"][precision] = {"error": (done.stderr.strip().splitlines() or ["failed"])[-1]}
        else:
            results["runs"][precision] = json.loads(done.stdout.strip().splitlines()[-1])
        # Other work on the machine inflates every figure: keep the 1-minute load next to them.
        results["runs"][precision]["load_avg_1min"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        size = sum(p.stat().st_size for p in folder.iterdir()) / 2**20
        results["runs"][precision]["folder_mb"] = round(size)
        print(precision, json.dumps(results["runs"][precision]), flush=True)
    args.json.write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
