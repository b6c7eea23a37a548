#!/usr/bin/env python3
"""serve.py under idle sockets and slow headers: how fast /health and a speech request are answered, and how many
file descriptors the server holds, with more idle sockets than --max-connections and clients that send their
headers a byte at a time (docs/DESIGN.md §http-bounds).

  .venv/bin/python bench/http_bounds_bench.py --model_dir BUILD --idle 1500 --slow 50 --out bench/http_bounds_results.md
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codes.checks.loopback_server import start_server, timed_speech_request  # noqa: E402
from codes.checks.results_page import bench_parser, machine, machine_line, write_page # noqa: E402


def descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def health_seconds(url: str, probes: int) -> list[float]:
    took = []
    for _ in range(probes):
        start = time.perf_counter()
        httpx.get(f"{url}/health", timeout=60).raise_for_status()
        took.append(time.perf_counter() - start)
    return took


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--model_dir", type=Path, required=True)
    parser.add_argument("--idle", type=int, default=1500, help="sockets that connect and send nothing")
    parser.add_argument("--slow", type=int, default=50, help="clients that send their headers a byte every 0.5 s")
    parser.add_argument("--max-connections", dest="max_connections", type=int, default=1000)
    parser.add_argument("--header-seconds", dest="header_seconds", type=float, default=10.0)
    parser.add_argument("--probes", type=int, default=20, help="/health requests timed in each phase")
    parser.add_argument("--out", type=Path, help="write the results page here (and .json beside it)")
    args = parser.parse_args()

    voices = Path(tempfile.mkdtemp(prefix="http-bounds-")) / "voices"
    proc, url = start_server(args.model_dir, 8, voices, None, extra=("--max-connections", str(args.max_connections),
                                                              "--header-seconds", str(args.header_seconds)))
    port = int(url.rsplit(":", 1)[1])
    rows, stop = [], threading.Event()
    try:
        timed_speech_request(url, 4, 0)  # pins alloy: the timed request below only speaks
        idle_fds = descriptors(proc.pid)
        rows.append(("idle server", health_seconds(url, args.probes), timed_speech_request(url, 4, 1)[1], idle_fds))
        held = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.idle)]
        slow = [socket.create_connection(("127.0.0.1", port)) for _ in range(args.slow)]
        for sock in slow:
            sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")

        def dribble():
            while not stop.wait(0.5):
                for sock in slow:
                    try:
                        sock.send(b"X")
                    except OSError:
                        pass

        threading.Thread(target=dribble, daemon=True).start()
        rows.append((f"{args.idle} idle sockets + {args.slow} slow-header clients", health_seconds(url, args.probes),
                     timed_speech_request(url, 4, 2)[1], descriptors(proc.pid)))
    finally:
        stop.set()
        proc.kill()
        proc.wait()
    info = machine()
    lines = [f"# serve.py under idle sockets and slow headers ({machine_line(info)})", "",
             f"`--max-connections {args.max_connections} --header-seconds {args.header_seconds:g}`, the tiny build, "
             f"{args.probes} `/health` probes per phase, one 4-step speech request.", "",
             "| phase | /health p50 | /health max | speech request | server's file descriptors |", "|---|---|---|---|---|"]
    data = []
    for phase, took, speech, fds in rows:
        lines.append(f"| {phase} | {np.median(took) * 1000:.1f} ms | {max(took) * 1000:.1f} ms | {speech:.2f} s | {fds} |")
        data.append({"phase": phase, "health_s": took, "speech_s": speech, "descriptors": fds})
    write_page(args.out, lines, {"machine": info, "rows": data})


if __name__ == "__main__":
    main()
