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

import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codes.checks.results_page import bench_parser, machine # noqa: E402
from codes.runtime.contract.settings import GenerationSettings  # noqa: E402
from codes.runtime.model.decoding import RandomNoise  # noqa: E402
from codes.runtime.model.engine import StepEngine, step_tokens  # noqa: E402
from codes.runtime.request import Voice  # noqa: E402
from codes.runtime.synthesis import OmniVoiceOnnx  # noqa: E402
from codes.runtime.text.duration import paced_frames  # noqa: E402
from codes.serve.voices.book import DESIGN_VOICES  # noqa: E402
from codes.serve.voices.pins import PIN_SECONDS, PIN_TEXTS, PinSettings  # noqa: E402

REPLY = "Turning on the kitchen lights."
TARGET = 53  # frames: the reply's 2.1 s


def timed_steps(engine: StepEngine, configs: list[list], repeats: int) -> list[tuple[int, float]]:
    """(tokens, median seconds) of one step of each config (a list of requests), the configs taken
    in turn in every round, so a slow spell of the machine falls on all of them alike."""
    settings = GenerationSettings(num_steps=repeats + 1)
    batches = [[engine.make_item(r, settings, RandomNoise(i)) for i, r in enumerate(requests)] for requests in configs]
    for items in batches:
        engine.step(items)  # the first run at a shape allocates
    seconds = [[] for _ in batches]
    for _ in range(repeats):
        for times, items in zip(seconds, batches):
            start = time.perf_counter()
            engine.step(items)
            times.append(time.perf_counter() - start)
    return [(step_tokens(items), statistics.median(times)) for items, times in zip(batches, seconds)]


def voice(frames: int, text: str) -> Voice:
    codes = np.random.default_rng(frames).integers(0, 1024, (8, frames), dtype=np.int64)
    return Voice(codes, text, None)


def main() -> int:
    p = bench_parser(__doc__)
    p.add_argument("--model_dir", type=Path, required=True)
    p.add_argument("--threads", type=int)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--pin-seconds", dest="pin_seconds", type=float, nargs="+", default=[1.5, 3.0, 5.0])
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    tts = OmniVoiceOnnx(args.model_dir, threads=args.threads)
    engine = StepEngine(tts)

    def request(prompt: Voice | None, instruct=None):
        return tts.settle([REPLY], "en", instruct, prompt, num_frames=TARGET)[0]

    sample = "The quick brown fox jumps over the lazy dog."
    shapes = [(1, frames) for frames in (0, 25, 50, 75, 100, 125, 150, 200)] + [(2, 50), (4, 50)]
    instruct = DESIGN_VOICES["alloy"]
    pin_settings = [PinSettings(seconds=s) for s in args.pin_seconds]
    configs = [[request(voice(frames, sample) if frames else None)] * count for count, frames in shapes]
    configs.append([request(None, instruct)])
    configs += [[request(voice(paced_frames(pin.text), pin.text))] for pin in pin_settings]  # as serve.py pins
    timed = timed_steps(engine, configs, args.repeats)
    curve = [{"items": count, "prompt_frames": frames, "tokens": tokens, "seconds": seconds}
             for (count, frames), (tokens, seconds) in zip(shapes, timed)]
    slope, intercept = np.polyfit([c["tokens"] for c in curve], [c["seconds"] for c in curve], 1)
    tokens, seconds = timed[len(shapes)]
    pins = [{"pin_seconds": 0, "pin_text": "(none: the instruct alone)", "pin_frames": 0, "tokens": tokens,
             "seconds": seconds}]
    pins += [{"pin_seconds": pin.seconds, "pin_text": pin.text, "pin_frames": paced_frames(pin.text), "tokens": tokens,
              "seconds": seconds} for pin, (tokens, seconds) in zip(pin_settings, timed[len(shapes) + 1:])]

    info = machine()
    result = {"model_dir": str(args.model_dir), "machine": info, "threads": args.threads, "curve": curve,
              "fit": {"fixed_s": float(intercept), "per_token_s": float(slope)}, "pins": pins}
    lines = [f"# A decoding step's cost against its tokens: `{args.model_dir.name}`", "",
             f"{info.get('cpu', '?')}, {info.get('logical_cpus', '?')} cores ({', '.join(info.get('isa', [])) or '?'}); "
             f"medians of {args.repeats} interleaved rounds, a step of each shape a round, as the server's engine runs them. Made by `bench/step_cost.py`.", "",
             "| items | prompt frames | tokens | step (s) | s per 100 tokens |", "|---|---|---|---|---|"]
    lines += [f"| {c['items']} | {c['prompt_frames']} | {c['tokens']} | {c['seconds']:.3f} | "
              f"{100 * c['seconds'] / c['tokens']:.3f} |" for c in curve]
    lines += ["", f"Least-squares fit: step = {intercept:.3f} s + {1000 * slope:.2f} ms per token.", "",
              f"The reply \"{REPLY}\" ({TARGET} frames) cloning a pinned design voice (serve.py's default: "
              f"{PIN_SECONDS:g} s):", "",
              "| --pin-seconds | pin sentence | pin frames | tokens | step (s) | vs the old pin (its longest sentence) |",
              "|---|---|---|---|---|---|"]
    old = pins[-1]["seconds"] if pins[-1]["pin_text"] == PIN_TEXTS[-1] else None
    lines += [f"| {p['pin_seconds']:g} | {p['pin_text']} | {p.get('pin_frames', 0)} | {p['tokens']} | "
              f"{p['seconds']:.3f} | {p['seconds'] / old:.2f}x |" if old else
              f"| {p['pin_seconds']:g} | {p['pin_text']} | {p.get('pin_frames', 0)} | {p['tokens']} | "
              f"{p['seconds']:.3f} | |" for p in pins]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
