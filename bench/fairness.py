#!/usr/bin/env python3
"""How long a flood of new requests can stall another request's running stream, with the engine's
rule (a later chunk past its due time is as pressing as a first chunk) and without it, side by side.

  .venv/bin/python bench/fairness.py --model_dir models/demo-cpu --out bench/fairness_results.md

In one process, on the real engine and the request lifecycle every door uses (no HTTP): `--flooders`
clients each loop new requests of long text and drop each after its first audio, so the engine
always has first chunks waiting, the worst a client can do with requests alone. Beside them a
listener speaks `--sentences` sentences and plays each piece in real time: a piece that arrives
after the one before has finished playing is a stall the listener hears. The rule is turned off
for the "before" arm by giving WorkItem the old pressing() (first chunks only).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import serve  # noqa: E402
from codes.checks.results_page import bench_parser, machine, machine_line, write_page # noqa: E402
from codes.runtime.contract.specs import SAMPLE_RATE  # noqa: E402
from codes.runtime.model.engine import WorkItem  # noqa: E402
from codes.serve.core.lifecycle import SpeechRequest  # noqa: E402
from codes.serve.core.params import parse_speech  # noqa: E402
from codes.serve.launch.startup import load_model, service_options, service_state  # noqa: E402

LONG = " ".join(f"This is sentence number {i} of a request that will never be heard." for i in range(30))
LISTENED = ("Good morning. The weather today is mild, with a light breeze from the west. In the afternoon "
            "clouds gather over the hills, and by evening a little rain may fall on the town. Tomorrow "
            "brings sunshine again, so keep your umbrella close but your sunglasses closer. That is all.")


async def flood(state, stop: asyncio.Event, body: dict, seconds: float) -> int:
    opened, until = 0, time.perf_counter() + seconds
    while not stop.is_set() and time.perf_counter() < until:
        params = parse_speech({**body, "input": LONG}, state.config.limits, state.config.settings)
        try:
            async with SpeechRequest(state, params, "bench") as speaking:
                opened += 1
                async for _ in speaking.pieces():
                    break  # dropped after its first audio: only first chunks reach the engine
        except Exception:  # 429 while the slots are full: try again at once
            await asyncio.sleep(0)
    return opened


async def listen(state, body: dict) -> dict:
    """Each piece's arrival against when the one before finished playing; the stalls heard."""
    params = parse_speech({**body, "input": LISTENED}, state.config.limits, state.config.settings)
    start = time.perf_counter()
    stalls, played_until, first = [], None, None
    async with SpeechRequest(state, params, "bench") as speaking:
        async for wav in speaking.pieces():
            now = time.perf_counter()
            if played_until is None:
                first, played_until = now - start, now
            else:
                stalls.append(max(0.0, now - played_until))
                played_until = max(now, played_until)
            played_until += len(wav) / SAMPLE_RATE
    return {"first_audio_s": first, "stalls_s": stalls, "pieces": len(stalls) + 1}


async def arm(state, flooders: int, body: dict, seconds: float) -> dict:
    stop = asyncio.Event()  # the flood ends when the listener has heard it all, or after `seconds`
    tasks = [asyncio.create_task(flood(state, stop, body, seconds)) for _ in range(flooders)]
    await asyncio.sleep(0.5)  # the flood is running before the listener comes
    heard = await listen(state, body)
    stop.set()
    heard["flood_requests"] = sum(await asyncio.gather(*tasks))
    return heard


def old_pressing(self, now: float) -> bool:  # the rule before: only first chunks and waited-on voices
    return self.urgent


def main(argv=None) -> int:
    p = bench_parser(__doc__)
    p.add_argument("--model_dir", type=Path, required=True)
    p.add_argument("--flooders", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3, help="each arm runs this many times, interleaved")
    p.add_argument("--num-steps", dest="num_steps", type=int, default=8)
    p.add_argument("--flood-seconds", dest="flood_seconds", type=float, default=30.0,
                   help="the flood stops after this long at most (without the rule it would stall the listener "
                        "for as long as it lasts)")
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    options = service_options(serve.parse_args(["--model_dir", str(args.model_dir), "--voices_dir",
                                                str(Path("/tmp") / "omnivoice-fairness-voices"),
                                                "--max-concurrent", str(args.flooders + 1),
                                                "--num-steps", str(args.num_steps), "--preload-voices", "alloy"]))
    state = service_state(options)
    state.model = load_model(options, state.voices)
    body = {"voice": "alloy", "response_format": "pcm"}
    rule = WorkItem.pressing
    results = {"before": [], "after": []}
    try:
        for _ in range(args.rounds):
            for name in ("before", "after"):
                WorkItem.pressing = old_pressing if name == "before" else rule
                results[name].append(asyncio.run(arm(state, args.flooders, body, args.flood_seconds)))
                print(name, json.dumps(results[name][-1]), file=sys.stderr, flush=True)
    finally:
        WorkItem.pressing = rule
        state.model.stop()
    host = machine()
    write_page(args.out, summary(results, args, machine_line(host)), {"results": results, "machine": host})
    return 0


def summary(results: dict, args, host: str) -> list[str]:
    lines = [f"# A flood of new requests against a running stream ({args.flooders} flooders)", "",
             f"Machine: {host}. Build: {args.model_dir}, {args.num_steps} steps, {args.rounds} rounds per arm, "
             f"interleaved, in one process (bench/fairness.py); the flood lasts at most {args.flood_seconds:g} s.", "",
             "| engine rule | first audio (median) | worst stall heard | total stall heard (median) | flood requests |",
             "|---|---|---|---|---|"]
    for name, label in (("before", "first chunks only pressing (before)"),
                        ("after", "a later chunk that must start now to be done in time pressing too (now)")):
        runs = results[name]
        lines.append(f"| {label} | {statistics.median(r['first_audio_s'] for r in runs):.2f} s "
                     f"| {max(max(r['stalls_s'], default=0) for r in runs):.2f} s "
                     f"| {statistics.median(sum(r['stalls_s']) for r in runs):.2f} s "
                     f"| {sum(r['flood_requests'] for r in runs)} |")
    return lines


if __name__ == "__main__":
    sys.exit(main())
