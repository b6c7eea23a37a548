#!/usr/bin/env python3
"""A decoding step's seconds against its tokens, and what a design voice's pin length costs a reply.

  .venv/bin/python bench/step_cost.py --model_dir models/full-cpu_int8 --out bench/step_cost.md

Two tables, each step timed as the server's engine runs it (StepEngine.step, medians of --repeats):
- the curve: one item, a 53-frame (2 s) target, behind clone prompts of 0 to 200 frames, and batches of
  2 and 4 such items; tokens are the positions the backbone runs (conditional rows padded to the
  longest prompt, unconditional rows to the longest target);
- the pin: the voice-assistant reply "Turning on the kitchen lights." cloning a pinned design voice
  of each --pin-seconds (its pin sentence and frames as serve.py makes them), and with no prompt.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codes.checks.bench import machine  # noqa: E402
from codes.runtime.decoding import RandomNoise  # noqa: E402
from codes.runtime.engine import StepEngine, step_tokens  # noqa: E402
from codes.runtime.settings import GenerationSettings  # noqa: E402
from codes.runtime.specs import FRAME_RATE  # noqa: E402
from codes.runtime.synthesis import OmniVoiceOnnx, Voice  # noqa: E402
from codes.serve.voices import DESIGN_VOICES, PIN_SECONDS, PinSettings  # noqa: E402

REPLY = "Turning on the kitchen lights."
TARGET = 53  # frames: the reply's 2.1 s


def timed_step(engine: StepEngine, requests, repeats: int) -> tuple[int, float]:
    settings = GenerationSettings(num_steps=repeats + 1)
    items = [engine.make_item(r, settings, RandomNoise(i)) for i, r in enumerate(requests)]
    engine.step(items)  # the first run at a shape allocates
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        engine.step(items)
        seconds.append(time.perf_counter() - start)
    return step_tokens(items), statistics.median(seconds)


def voice(frames: int, text: str) -> Voice:
    codes = np.random.default_rng(frames).integers(0, 1024, (8, frames), dtype=np.int64)
    return Voice(codes, text, None)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", type=Path, required=True)
    p.add_argument("--threads", type=int)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pin-seconds", dest="pin_seconds", type=float, nargs="+", default=[1.0, 1.5, 2.0, 3.0, 4.9])
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    tts = OmniVoiceOnnx(args.model_dir, threads=args.threads)
    engine = StepEngine(tts)

    def request(prompt: Voice | None, instruct=None):
        return tts.settle([REPLY], "en", instruct, prompt, num_frames=TARGET)[0]

    curve = []
    for frames in (0, 25, 50, 75, 100, 125, 150, 200):
        prompt = voice(frames, "The quick brown fox jumps over the lazy dog.") if frames else None
        tokens, seconds = timed_step(engine, [request(prompt)], args.repeats)
        curve.append({"items": 1, "prompt_frames": frames, "tokens": tokens, "seconds": seconds})
        print(curve[-1], flush=True)
    for count in (2, 4):
        tokens, seconds = timed_step(engine, [request(voice(50, "The quick brown fox jumps over the lazy dog."))] * count,
                                     args.repeats)
        curve.append({"items": count, "prompt_frames": 50, "tokens": tokens, "seconds": seconds})
        print(curve[-1], flush=True)
    slope, intercept = np.polyfit([c["tokens"] for c in curve], [c["seconds"] for c in curve], 1)

    pins = []
    instruct = DESIGN_VOICES["alloy"]
    tokens, seconds = timed_step(engine, [request(None, instruct)], args.repeats)
    pins.append({"pin_seconds": 0, "pin_text": "(none: the instruct alone)", "tokens": tokens, "seconds": seconds})
    for pin_seconds in args.pin_seconds:
        pin = PinSettings(seconds=pin_seconds)
        tokens, seconds = timed_step(engine, [request(voice(round(pin_seconds * FRAME_RATE), pin.text))], args.repeats)
        pins.append({"pin_seconds": pin_seconds, "pin_text": pin.text, "tokens": tokens, "seconds": seconds})
        print(pins[-1], flush=True)

    info = machine()
    result = {"model_dir": str(args.model_dir), "machine": info, "threads": args.threads, "curve": curve,
              "fit": {"fixed_s": float(intercept), "per_token_s": float(slope)}, "pins": pins}
    lines = [f"# A decoding step's cost against its tokens: `{args.model_dir.name}`", "",
             f"{info.get('cpu', '?')}, {info.get('logical_cpus', '?')} cores ({', '.join(info.get('isa', [])) or '?'}); "
             f"medians of {args.repeats} steps each, as the server's engine runs them. Made by `bench/step_cost.py`.", "",
             "| items | prompt frames | tokens | step (s) | s per 100 tokens |", "|---|---|---|---|---|"]
    lines += [f"| {c['items']} | {c['prompt_frames']} | {c['tokens']} | {c['seconds']:.3f} | "
              f"{100 * c['seconds'] / c['tokens']:.3f} |" for c in curve]
    lines += ["", f"Least-squares fit: step = {intercept:.3f} s + {1000 * slope:.2f} ms per token.", "",
              f"The reply \"{REPLY}\" ({TARGET} frames) cloning a pinned design voice (serve.py's default: "
              f"{PIN_SECONDS:g} s):", "",
              "| pin (s) | pin sentence | tokens | step (s) | vs the old 4.9 s pin |", "|---|---|---|---|---|"]
    old = next((p["seconds"] for p in pins if p["pin_seconds"] == 4.9), None)
    lines += [f"| {p['pin_seconds']:g} | {p['pin_text']} | {p['tokens']} | {p['seconds']:.3f} | "
              f"{p['seconds'] / old:.2f}x |" if old else
              f"| {p['pin_seconds']:g} | {p['pin_text']} | {p['tokens']} | {p['seconds']:.3f} | |" for p in pins]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
