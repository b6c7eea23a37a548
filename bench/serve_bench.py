#!/usr/bin/env python3
"""N concurrent streaming clients against serve.py on loopback, with step-level batching and with --max-batch 1;
or (--ray) plain serve.py against serve.py --ray with each of --replicas sharing the same --threads.

  .venv/bin/python bench/serve_bench.py --model_dir BUILD --clients 1 4 8 16 --num_steps 32 --out bench/serve_results.md
  .venv/bin/python bench/serve_bench.py --model_dir BUILD --ray --replicas 1 2 --threads 2 --clients 1 4 16 \
      --num_steps 16 --out bench/cluster_results.md

Each client sends one request (a two-sentence text, pcm, streamed) per round; reported: throughput (audio
seconds per wall second), time to first audio and total latency p50/p95 (and, with --out, the rows as .json).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
TEXT = "The server streams each sentence as soon as it is ready. Concurrent clients share every decoding step."


def loopback_port() -> int:
    """A port free on 127.0.0.1 now, for a server a bench starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start(model_dir: Path, max_batch: int, voices: Path, threads: int | None, higgs_dir: Path | None = None,
          root: Path = ROOT, extra: tuple[str, ...] = ()):
    """serve.py of the checkout at `root` on a free loopback port, once it prints its ready line."""
    port = loopback_port()
    args = [sys.executable, str(root / "serve.py"), "--model_dir", str(model_dir), "--port", str(port),
            "--voices_dir", str(voices), "--max-batch", str(max_batch)] + (["--threads", str(threads)] if threads else [])
    if higgs_dir:
        args += ["--higgs_dir", str(higgs_dir)]
    args += list(extra)
    log = open(voices.parent / f"{voices.name}-server-{port}.log", "w")  # kept to say why, should it not start
    proc = subprocess.Popen(args, cwd=root, stdout=subprocess.PIPE, stderr=log, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0] and proc.stdout.readline().startswith("ready: "):
            return proc, f"http://127.0.0.1:{port}"
        if proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"serve.py did not start; its log: {log.name}")


def one_request(url: str, num_steps: int, seed: int, text: str = TEXT) -> tuple[float, float, float]:
    """(first audio, total, audio seconds) of one streamed pcm request."""
    body = {"model": "omnivoice", "input": text, "voice": "alloy", "response_format": "pcm", "num_steps": num_steps,
            "seed": seed}
    start = time.perf_counter()
    first, size = None, 0
    with httpx.stream("POST", f"{url}/v1/audio/speech", json=body, timeout=3600) as response:
        response.raise_for_status()
        for chunk in response.iter_raw():
            if first is None and chunk:
                first = time.perf_counter() - start
            size += len(chunk)
    return first, time.perf_counter() - start, size / 2 / 24000


def run(url: str, clients: int, num_steps: int):
    start = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda i: one_request(url, num_steps, i), range(clients)))
    wall = time.perf_counter() - start
    firsts, totals, audio = (np.array(column) for column in zip(*results))
    return {"throughput": audio.sum() / wall, "ttfa_p50": np.percentile(firsts, 50), "ttfa_p95": np.percentile(firsts, 95),
            "total_p50": np.percentile(totals, 50), "total_p95": np.percentile(totals, 95), "wall": wall}


def setups(args) -> list[tuple[str, int, tuple[str, ...]]]:
    """(label, --max-batch, extra serve.py flags) of each server the run compares."""
    if not args.ray:
        return [(f"--max-batch {b}", b, ()) for b in (args.max_batch, 1)]
    total = args.threads or os.cpu_count()
    runs = [(f"serve.py, {total} threads", args.max_batch, ())]
    for replicas in args.replicas:
        per = max(total // replicas, 1)
        runs.append((f"--ray, {replicas} replica(s) x {per} thread(s)", args.max_batch,
                     ("--ray", "--replicas", str(replicas), "--threads", str(per))))
    return runs


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model_dir", type=Path, required=True)
    p.add_argument("--higgs_dir", type=Path, help="a codec folder, for a model folder that has none")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4, 8, 16])
    p.add_argument("--num_steps", type=int, default=32)
    p.add_argument("--max-batch", dest="max_batch", type=int, default=8)
    p.add_argument("--threads", type=int, help="ONNX Runtime threads; with --ray, shared by each run's replicas "
                                                "(default: all cores)")
    p.add_argument("--ray", action="store_true", help="compare serve.py with serve.py --ray at each of --replicas")
    p.add_argument("--replicas", type=int, nargs="+", default=[1, 2], help="replica counts for --ray")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    voices = Path(os.environ.get("TMPDIR", "/tmp")) / "serve-bench-voices"
    rows = []
    for label, max_batch, extra in setups(args):
        threads = None if extra else args.threads
        proc, url = start(args.model_dir, max_batch, voices, threads, args.higgs_dir, extra=extra)
        try:
            one_request(url, args.num_steps, 0)  # pins the voice and warms the sessions
            for clients in args.clients:
                result = run(url, clients, args.num_steps)
                rows.append({"setup": label, "clients": clients, **{k: float(v) for k, v in result.items()}})
                print(label, clients, {k: round(float(v), 3) for k, v in result.items()}, flush=True)
        finally:
            stop(proc)
    first = "server" if args.ray else "--max-batch"
    lines = [f"# serve.py under concurrent clients: `{args.model_dir.name}`, {args.num_steps} steps", "",
             f"Each client streams one two-sentence request ({len(TEXT)} characters, pcm); "
             f"{os.cpu_count()} CPU cores. Throughput is audio seconds per wall second.", "",
             f"| {first} | clients | throughput (audio s/s) | first audio p50 / p95 (s) | total p50 / p95 (s) |",
             "|---|---|---|---|---|"]
    for r in rows:
        shown = r["setup"].removeprefix("--max-batch ")
        lines.append(f"| {shown} | {r['clients']} | {r['throughput']:.2f} | {r['ttfa_p50']:.2f} / {r['ttfa_p95']:.2f} "
                     f"| {r['total_p50']:.2f} / {r['total_p95']:.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
        args.out.with_suffix(".json").write_text(json.dumps({"model": args.model_dir.name, "num_steps": args.num_steps,
                                                             "cpu_count": os.cpu_count(), "rows": rows}, indent=1))
    return 0


def stop(proc: subprocess.Popen) -> None:
    """Ctrl-C, as a user stops it (serve.py --ray then stops its Ray too); killed if it does not end."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    sys.exit(main())
