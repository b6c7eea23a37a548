#!/usr/bin/env python3
"""Barge-in on the stream door under load: how long from a client's cancel to `cancelled`, to its request
slot being free, and to its work items being out of the engine, while 4 other streams are spoken.

  .venv/bin/python bench/bargein.py --model_dir models/tiny-cpu_fp32 --out bench/bargein_results.md

The server runs in a process of its own (this script with --serve: serve.py's own setup, plus hooks that
print when a cancelled utterance's slot is released and when the last of its work items leaves the engine,
on the machine's monotonic clock, which both processes share). The load: 4 threads each streaming a long
text over HTTP, again and again. Each round opens /v1/audio/speech/stream, sends a long text, waits for its
first audio and a random 0-200 ms more (so the cancel lands anywhere in a decoding step), then cancels.
"""

from __future__ import annotations

import json
import queue
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codes.checks.loopback_server import loopback_port  # noqa: E402
from codes.checks.results_page import bench_parser, machine, machine_line, write_page # noqa: E402

LOAD_STREAMS = 4
LOAD_TEXT = " ".join(f"Another listener hears sentence {i} of a long answer, spoken at an even pace." for i in range(40))
CUT_TEXT = " ".join(f"This is sentence number {i}, and it goes on for a while." for i in range(30))


# --- the server's side (--serve) -----------------------------------------------------------------------

def serve(argv: list[str]) -> None:
    """serve.py's process, with the hooks that say when a cancelled utterance lets go of what it held."""
    import uvicorn

    import serve as serve_script
    from codes.serve.doors.http import create_app
    from codes.serve.core.lifecycle import SpeechRequest
    from codes.serve.launch.startup import load_model, service_options, service_state

    def emit(kind: str, **fields) -> None:
        print(json.dumps({"event": kind, "at": time.monotonic(), **fields}), flush=True)

    release, end = SpeechRequest._release, SpeechRequest.end

    def released(self):  # the request slot
        if self.holds_slot and self.door == "ws":
            emit("slot_free")
        release(self)

    def ended(self, status, reason=None):  # a barge-in: watch what the utterance holds let go
        if self.door == "ws" and status == "cancelled" and self.ended is None:
            job_items = self.job.items if self.job is not None else []
            pending = [item for item in job_items if item is not None and not item.future.done()]
            running = sum(item in self.model.engine._running for item in pending)
            left = {"count": len(pending)}
            lock = threading.Lock()

            def gone(_):
                with lock:
                    left["count"] -= 1
                    if left["count"] == 0:
                        emit("engine_free")

            emit("cancel_seen", items=len(pending), in_last_step=running)
            if not self.holds_slot:  # it held none: text still held back, or waiting for more
                emit("slot_free")
            if not pending:
                emit("engine_free")
            for item in pending:
                item.future.add_done_callback(gone)
        end(self, status, reason)

    SpeechRequest._release, SpeechRequest.end = released, ended
    args = serve_script.parse_args(argv)
    options = service_options(args)
    state = service_state(options)
    state.model = load_model(options, state.voices)
    server = uvicorn.Server(uvicorn.Config(create_app(state), host="127.0.0.1", port=args.port, log_level="warning",
                                           ws_max_size=options.limits.ws_max_message_bytes))
    emit("ready")  # the model is loaded; the client waits for /health to answer
    server.run()


# --- the client's side -------------------------------------------------------------------------------------

def load(url: str, num_steps: int, stop: threading.Event, served: list) -> None:
    body = {"model": "omnivoice", "input": LOAD_TEXT, "voice": "alloy", "response_format": "pcm",
            "num_steps": num_steps}
    while not stop.is_set():
        try:
            with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=600) as response:
                for _ in response.iter_bytes():
                    if stop.is_set():
                        return
        except httpx.HTTPError:
            if stop.is_set():  # the server went away at the end
                return
            raise
        served.append(1)


def one_round(ws_url: str, num_steps: int, rng: random.Random, events: queue.Queue, speaking: bool) -> dict:
    """speaking: cancel 0-200 ms after the first audio, else 0-200 ms after the text (its first chunk is then
    queued or in a running step)."""
    from websockets.sync.client import connect

    while not events.empty():  # what an earlier round's closing left
        events.get()
    with connect(ws_url, open_timeout=600) as ws:
        ws.send(json.dumps({"type": "start", "voice": "alloy", "num_steps": num_steps}))
        ws.send(json.dumps({"type": "text", "text": CUT_TEXT}))
        while speaking and not isinstance(ws.recv(timeout=600), bytes):
            pass
        time.sleep(rng.uniform(0, 0.2))
        sent = time.monotonic()
        ws.send(json.dumps({"type": "cancel"}))
        while True:
            message = ws.recv(timeout=600)
            if isinstance(message, str) and json.loads(message)["type"] == "cancelled":
                answered = time.monotonic()
                break
    seen = {}
    while not {"slot_free", "engine_free", "cancel_seen"} <= set(seen):
        event = events.get(timeout=600)
        seen.setdefault(event["event"], event)
    return {"cancelled_ms": 1000 * (answered - sent), "slot_free_ms": 1000 * (seen["slot_free"]["at"] - sent),
            "engine_free_ms": 1000 * (seen["engine_free"]["at"] - sent), "items": seen["cancel_seen"]["items"],
            "in_last_step": seen["cancel_seen"]["in_last_step"]}


def main() -> int:
    if "--serve" in sys.argv:
        serve([arg for arg in sys.argv[1:] if arg != "--serve"])
        return 0
    p = bench_parser(__doc__)
    p.add_argument("--model_dir", type=Path, required=True)
    p.add_argument("--num_steps", type=int, default=16)
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--threads", type=int)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    port = loopback_port()
    voices = Path(tempfile.mkdtemp(prefix="bargein-bench-")) / "voices"
    command = [sys.executable, str(Path(__file__).resolve()), "--serve", "--model_dir", str(args.model_dir), "--port",
               str(port), "--voices_dir", str(voices), "--num-steps", str(args.num_steps)]
    command += ["--threads", str(args.threads)] if args.threads else []
    child = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, text=True)
    events: queue.Queue = queue.Queue()
    ready = threading.Event()

    def read_events():
        for line in child.stdout:
            if line.startswith("{"):
                event = json.loads(line)
                (ready.set() if event["event"] == "ready" else events.put(event))

    threading.Thread(target=read_events, daemon=True).start()
    if not ready.wait(600):
        child.kill()
        raise SystemExit("the server did not start")
    url, ws_url = f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/v1/audio/speech/stream"
    deadline = time.monotonic() + 120
    while True:  # uvicorn listens a moment after the model is loaded
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise SystemExit("the server's /health never answered 200")
        time.sleep(0.1)
    stop, served, rows = threading.Event(), [], []
    rng = random.Random(args.seed)
    try:
        one_round(ws_url, args.num_steps, rng, events, True)  # pins the voice, warms the door
        loaders = [threading.Thread(target=load, args=(url, args.num_steps, stop, served), daemon=True)
                   for _ in range(LOAD_STREAMS)]
        for loader in loaders:
            loader.start()
        while httpx.get(f"{url}/health").json()["requests_in_flight"] < LOAD_STREAMS:
            time.sleep(0.05)
        for index in range(2 * args.rounds):  # the two moments of a cancel, alternating
            rows.append({"when": "speaking" if index % 2 == 0 else "before audio",
                         **one_round(ws_url, args.num_steps, rng, events, index % 2 == 0)})
            print(rows[-1], flush=True)
        load_in_flight = httpx.get(f"{url}/health").json()["requests_in_flight"]
    finally:
        stop.set()
        child.kill()
        child.wait()
    m = machine()
    lines = [f"# Barge-in under load: `{args.model_dir.name}`, {args.num_steps} steps", "",
             f"{machine_line(m)}. serve.py in its own process; {LOAD_STREAMS} other streams (HTTP, a {len(LOAD_TEXT)}-"
             f"character text each, again and again; {load_in_flight} in flight at the end) share its steps. Each "
             f"round: a stream utterance of a {len(CUT_TEXT)}-character text, cancelled 0-200 ms after its first "
             "audio (speaking), or 0-200 ms after its text was sent (before audio: its first chunk queued or in a "
             f"running step); {args.rounds} rounds of each, alternating. Times from the cancel leaving the client (ms).",
             "", "| cancelled | from the cancel to | p50 | p90 | max |", "|---|---|---|---|---|"]
    for when in ("speaking", "before audio"):
        chosen = [row for row in rows if row["when"] == when]
        for key, name in (("cancelled_ms", "`cancelled` at the client"), ("slot_free_ms", "its request slot free"),
                          ("engine_free_ms", "its last work item out of the engine")):
            values = [row[key] for row in chosen]
            lines.append(f"| {when} | {name} | {np.percentile(values, 50):.1f} | {np.percentile(values, 90):.1f} | "
                         f"{max(values):.1f} |")
        running = [row for row in chosen if row["in_last_step"]]
        lines += [f"| {when} | (rounds with an item in the running step: {len(running)} of {len(chosen)}; their "
                  f"engine p50 {np.percentile([r['engine_free_ms'] for r in running], 50):.1f} ms) | | | |"
                  if running else f"| {when} | (no round had an item in the running step) | | | |"]
    lines += ["", "An item only waiting in the engine's queue leaves it at once on cancel; one in the step then running "
                  "leaves at that step's end. The request slot is released before `cancelled` is sent."]
    write_page(args.out, lines, {"machine": m, "model": args.model_dir.name, "num_steps": args.num_steps,
                                 "rounds": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
