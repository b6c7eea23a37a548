#!/usr/bin/env python3
"""A voice-assistant reply over Wyoming, streamed as the LLM writes it against one-shot once it is written.

  .venv/bin/python bench/wyoming_bench.py --model_dir models/full-cpu_int8 --higgs_dir models/full-higgs-fp16 \\
      --num_steps 16 --out bench/wyoming_results.md

One serve.py with --wyoming-uri and --num-steps; a 3-sentence reply, "written" by a simulated LLM one
word every --word-seconds (0: all at once). Time zero is when the LLM starts writing, as a listener
feels it:
- streaming: synthesize-start, a synthesize-chunk per word as it is written, synthesize-stop;
- one-shot: one synthesize when the whole reply is written (what a server without streaming gets).
First audio is the first audio-chunk; total is audio-stop. The two modes alternate, round by round.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codes.checks.loopback_server import loopback_port, start_server  # noqa: E402
from codes.checks.results_page import bench_parser, machine, machine_line, write_page # noqa: E402

REPLY = ("Sure, I turned on the kitchen lights and set them to half brightness. The living room stays dark, "
         "as you asked. Is there anything else you would like me to do?")


async def one(port: int, streaming: bool, word_seconds: float) -> tuple[float, float]:
    words = REPLY.split(" ")
    voice = SynthesizeVoice(name="alloy")
    async with AsyncTcpClient("127.0.0.1", port) as client:
        began = time.perf_counter()
        first = None

        async def write():
            if streaming:
                await client.write_event(SynthesizeStart(voice=voice).event())
            for i, word in enumerate(words):
                await asyncio.sleep(word_seconds)
                if streaming:
                    await client.write_event(SynthesizeChunk(text=word + (" " if i < len(words) - 1 else "")).event())
            if streaming:
                await client.write_event(Synthesize(text=REPLY, voice=voice).event())  # Home Assistant's copy
                await client.write_event(SynthesizeStop().event())
            else:
                await client.write_event(Synthesize(text=REPLY, voice=voice).event())

        writer = asyncio.create_task(write())
        while True:
            event = await client.read_event()
            if event is None:
                raise SystemExit("the server closed the connection")
            if event.type == "error":
                raise SystemExit(f"the server refused: {event.data}")
            if event.type == "audio-chunk" and first is None:
                first = time.perf_counter() - began
            if event.type == "audio-stop":
                total = time.perf_counter() - began
                break
        await writer
        return first, total


def main() -> int:
    p = bench_parser(__doc__)
    p.add_argument("--model_dir", type=Path, required=True)
    p.add_argument("--higgs_dir", type=Path)
    p.add_argument("--num_steps", type=int, default=16)
    p.add_argument("--word-seconds", dest="word_seconds", type=float, nargs="+", default=[0.05, 0.0],
                   help="seconds between the LLM's words (default: 0.05, a local LLM; and 0)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    port = loopback_port()
    voices = Path(tempfile.mkdtemp(prefix="wyoming-bench-")) / "voices"
    proc, _ = start_server(args.model_dir, 8, voices, args.threads, args.higgs_dir,
                    extra=("--wyoming-uri", f"tcp://127.0.0.1:{port}", "--num-steps", str(args.num_steps)))
    results: dict[str, dict] = {}
    try:
        asyncio.run(one(port, False, 0.0))  # pins the voice, warms everything
        for word_seconds in args.word_seconds:
            for mode in ("streaming", "one-shot"):
                results[f"{mode} @ {word_seconds:g}"] = {"first": [], "total": []}
            for _ in range(args.rounds):
                for mode in ("streaming", "one-shot"):
                    first, total = asyncio.run(one(port, mode == "streaming", word_seconds))
                    entry = results[f"{mode} @ {word_seconds:g}"]
                    entry["first"].append(first)
                    entry["total"].append(total)
                    print(mode, word_seconds, round(first, 3), round(total, 3), flush=True)
    finally:
        proc.kill()
        proc.wait()
    m = machine()
    lines = [f"# Wyoming: streamed as written against one-shot: `{args.model_dir.name}`, {args.num_steps} steps", "",
             f"{machine_line(m)}. A 3-sentence reply ({len(REPLY)} characters, {len(REPLY.split())} words), voice alloy; "
             f"the LLM writes a word every W seconds; times from its first word; p50 over {args.rounds} rounds, "
             "the modes alternating.", "",
             "| W (s/word) | reply written at (s) | mode | first audio p50 (s) | total p50 (s) | first audio, each round (s) |",
             "|---|---|---|---|---|---|"]
    for key, entry in results.items():
        mode, word_seconds = key.split(" @ ")
        written = float(word_seconds) * len(REPLY.split())
        lines.append(f"| {word_seconds} | {written:.1f} | {mode} | {np.median(entry['first']):.2f} | "
                     f"{np.median(entry['total']):.2f} | {', '.join(f'{v:.2f}' for v in entry['first'])} |")
    write_page(args.out, lines, {"machine": m, "model": args.model_dir.name, "num_steps": args.num_steps,
                                   "results": results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
