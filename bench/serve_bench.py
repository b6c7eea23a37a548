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

import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codes.checks.loopback_server import (  # noqa: E402
    TWO_SENTENCES, concurrent_requests, start_server, stop_server, timed_speech_request)
from codes.checks.results_page import bench_parser, machine, machine_line, write_page # noqa: E402


def run(url: str, clients: int, num_steps: int) -> dict:
    done = concurrent_requests(url, clients, num_steps)
    firsts, totals = np.array(done["first"]), np.array(done["total"])
    return {"throughput": done["audio_s"] / done["wall_s"], "ttfa_p50": np.percentile(firsts, 50),
            "ttfa_p95": np.percentile(firsts, 95), "total_p50": np.percentile(totals, 50),
            "total_p95": np.percentile(totals, 95), "wall": done["wall_s"]}


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
    p = bench_parser(__doc__)
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
        proc, url = start_server(args.model_dir, max_batch, voices, threads, args.higgs_dir, extra=extra)
        try:
            timed_speech_request(url, args.num_steps, 0)  # pins the voice and warms the sessions
            for clients in args.clients:
                result = run(url, clients, args.num_steps)
                rows.append({"setup": label, "clients": clients, **{k: float(v) for k, v in result.items()}})
                print(label, clients, {k: round(float(v), 3) for k, v in result.items()}, flush=True)
        finally:
            stop_server(proc)
    first = "server" if args.ray else "--max-batch"
    info = machine()
    lines = [f"# serve.py under concurrent clients: `{args.model_dir.name}`, {args.num_steps} steps", "",
             f"{machine_line(info)}. Each client streams one two-sentence request ({len(TWO_SENTENCES)} characters, "
             "pcm). Throughput is audio seconds per wall second.", "",
             f"| {first} | clients | throughput (audio s/s) | first audio p50 / p95 (s) | total p50 / p95 (s) |",
             "|---|---|---|---|---|"]
    for r in rows:
        shown = r["setup"].removeprefix("--max-batch ")
        lines.append(f"| {shown} | {r['clients']} | {r['throughput']:.2f} | {r['ttfa_p50']:.2f} / {r['ttfa_p95']:.2f} "
                     f"| {r['total_p50']:.2f} / {r['total_p95']:.2f} |")
    write_page(args.out, lines, {"machine": info, "model": args.model_dir.name, "num_steps": args.num_steps,
                                 "rows": rows})
    return 0


if __name__ == "__main__":
    sys.exit(main())
