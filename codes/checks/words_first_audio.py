"""Word timings through the stream door, timed as an agent hears them (bench/words_first_audio.py): from the
reply's text being sent to its first audio frame, to its last timing and to `done`, with and without
`word_timings`, rounds interleaved on one server. The claim it checks: a piece's audio never waits for its
words (docs/agents.md, Word timings), so the first audio is the same either way and the words come after."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from websockets.sync.client import connect

from codes.checks.loopback_server import start_server, stop_server
from codes.checks.results_page import machine, machine_line, write_page

REPLY = ("Sure, I can help with that. The kitchen lights are on now, and the hall stays dark as you asked. "
         "Is there anything else you need before you go?")


def one_reply(url: str, num_steps: int, seed: int, word_timings: bool) -> dict:
    """One reply on a fresh connection: seconds from sending it to its first audio, its last timing, `done`."""
    start_message = {"type": "start", "voice": "alloy", "language": "en", "num_steps": num_steps, "seed": seed,
                     "word_timings": word_timings}
    with connect(url.replace("http://", "ws://") + "/v1/audio/speech/stream", open_timeout=600) as ws:
        ws.send(json.dumps(start_message))
        began = time.perf_counter()
        ws.send(json.dumps({"type": "text", "text": REPLY}))
        ws.send(json.dumps({"type": "end"}))
        first = last_audio = last_timing = None
        words = samples = 0
        while True:
            message = ws.recv(timeout=3600)
            now = time.perf_counter() - began
            if isinstance(message, bytes):
                first = now if first is None else first
                last_audio = now
                samples += len(message) // 2
                continue
            event = json.loads(message)
            if event["type"] == "timing":
                last_timing, words = now, words + len(event.get("words", []))
            elif event["type"] == "done":
                return {"first_audio_s": first, "last_audio_s": last_audio, "last_timing_s": last_timing,
                        "words_after_audio_s": last_timing - last_audio, "done_s": now, "words": words,
                        "audio_s": samples / 24000}
            elif event["type"] == "error":
                raise SystemExit(f"the server refused the reply: {event['error']['message']}")


def measure(model_dir: Path, num_steps: int, rounds: int, threads: int | None) -> dict:
    with tempfile.TemporaryDirectory() as folder:
        proc, url = start_server(model_dir, 8, Path(folder) / "voices", threads)
        try:
            one_reply(url, num_steps, 0, True)  # warms the aligner (loaded, hashes checked, on first use)
            runs = {"without": [], "with": []}
            for round_index in range(rounds):
                for mode in ("without", "with") if round_index % 2 == 0 else ("with", "without"):
                    runs[mode].append(one_reply(url, num_steps, round_index + 1, mode == "with"))
        finally:
            stop_server(proc)
    return {"model_dir": str(model_dir), "num_steps": num_steps, "rounds": rounds, "runs": runs, "machine": machine()}


def page(result: dict) -> list[str]:
    lines = ["# Word timings through the stream door: first audio with and without them", "",
             machine_line(result["machine"]), "",
             f"`bench/words_first_audio.py` on `{result['model_dir']}`, {result['num_steps']} steps, "
             f"{result['rounds']} rounds of each, interleaved, one reply of {len(REPLY)} characters on a fresh "
             "connection, medians (and the range) in seconds from the reply's text being sent:", "",
             "| word_timings | first audio | last audio | last timing | last timing after last audio | done | words | "
             "audio |", "|---|---|---|---|---|---|---|---|"]
    for mode, runs in result["runs"].items():
        def cell(key):
            values = [run[key] for run in runs]
            return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"
        lines.append(f"| {mode} | {cell('first_audio_s')} | {cell('last_audio_s')} | {cell('last_timing_s')} | "
                     f"{cell('words_after_audio_s')} | {cell('done_s')} | {runs[0]['words']} | {runs[0]['audio_s']:.2f} s |")
    return lines


def run(model_dir: Path, num_steps: int, rounds: int, threads: int | None, out: Path | None) -> dict:
    result = measure(model_dir, num_steps, rounds, threads)
    write_page(out, page(result), result)
    return result
