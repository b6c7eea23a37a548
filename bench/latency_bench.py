#!/usr/bin/env python3
"""Time to first audio for voice-assistant replies: this checkout's serve.py against another commit's,
side by side on one machine and one build, interleaved.

  git worktree add /tmp/omnivoice-base 15ff801
  .venv/bin/python bench/latency_bench.py --model_dir models/full-cpu_int8 --higgs_dir models/full-higgs-fp16 \\
      --base /tmp/omnivoice-base --out bench/latency_results.md

Servers: `base` (the other checkout, --max-batch 8), `now` (this one, --max-batch 8) and `now-mb1` (this one,
--max-batch 1: one item at a time). All run at once, idle but for the one being measured; each round sends
the same requests to each in turn. Every client streams pcm with the voice alloy and a seed; first audio
is the first body bytes.
- warm: after one request of the same workload;
- cold: the first request after a restart (the server killed and started again with the same voices
  folder, so pins it kept on disk are found).
`--also-pin-seconds 1` adds this checkout with another pin length (`now-pin1`), for one client.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from codes.checks.loopback_server import concurrent_requests, start_server, timed_speech_request  # noqa: E402
from codes.checks.results_page import bench_parser, machine, machine_line, write_page # noqa: E402

WORKLOADS = {
    "2 s reply": "Turning on the kitchen lights.",
    "two sentences": "The living room lights are now on. I also set the thermostat to twenty one degrees for you.",
    "long first sentence": ("Sure, I checked the forecast for tomorrow, and it looks like light rain in the morning, "
                            "clearing by noon, with a high of eighteen degrees, so bring an umbrella."),
}


class Server:
    def __init__(self, name: str, root: Path, model_dir: Path, higgs_dir: Path | None, max_batch: int,
                 voices: Path, threads: int | None, extra: tuple[str, ...] = ()):
        self.name, self.root, self.model_dir, self.higgs_dir = name, root, model_dir, higgs_dir
        self.max_batch, self.voices, self.threads, self.extra = max_batch, voices, threads, extra
        self.proc = self.url = None

    def start(self) -> float:
        began = time.perf_counter()
        self.proc, self.url = start_server(self.model_dir, self.max_batch, self.voices, self.threads,
                                           self.higgs_dir, root=self.root, extra=self.extra)
        return time.perf_counter() - began

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait()


def summary(rounds: list[dict]) -> dict:
    firsts = np.concatenate([r["first"] for r in rounds])
    totals = np.concatenate([r["total"] for r in rounds])
    audio, wall = sum(r["audio_s"] for r in rounds), sum(r["wall_s"] for r in rounds)
    return {"first_p50": float(np.percentile(firsts, 50)), "first_p95": float(np.percentile(firsts, 95)),
            "total_p50": float(np.percentile(totals, 50)), "total_p95": float(np.percentile(totals, 95)),
            "throughput": audio / wall, "requests": int(len(firsts))}


def main() -> int:
    p = bench_parser(__doc__)
    p.add_argument("--model_dir", type=Path, required=True)
    p.add_argument("--higgs_dir", type=Path)
    p.add_argument("--base", type=Path, required=True, help="a checkout of the commit to compare with")
    p.add_argument("--clients", type=int, nargs="+", default=[1, 4])
    p.add_argument("--num_steps", type=int, nargs="+", default=[16, 32])
    p.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    p.add_argument("--rounds", type=int, default=2, help="warm one-client rounds per setting and server")
    p.add_argument("--crowd-rounds", dest="crowd_rounds", type=int, default=1,
                   help="warm rounds with more than one client (each gives a sample per client)")
    p.add_argument("--cold", type=int, default=1, help="restarts per server (the 2 s reply at the first --num_steps)")
    p.add_argument("--four-client-steps", dest="four_steps", type=int, nargs="+",
                   help="step counts for more than one client (default: all of --num_steps)")
    p.add_argument("--also-pin-seconds", dest="also_pin_seconds", type=float, nargs="*", default=[],
                   help="also run this checkout with these --pin-seconds (one-client rows)")
    p.add_argument("--threads", type=int)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    voices = Path(tempfile.mkdtemp(prefix="latency-bench-"))
    if args.higgs_dir:
        args.higgs_dir = args.higgs_dir.resolve()  # the servers run in their own checkouts
    servers = [Server("base", args.base.resolve(), args.model_dir.resolve(), args.higgs_dir, 8, voices / "base",
                      args.threads),
               Server("now", ROOT, args.model_dir.resolve(), args.higgs_dir, 8, voices / "now", args.threads),
               Server("now-mb1", ROOT, args.model_dir.resolve(), args.higgs_dir, 1, voices / "now-mb1", args.threads)]
    for seconds in args.also_pin_seconds:  # the same checkout with another pin length, one client only
        servers.append(Server(f"now-pin{seconds:g}", ROOT, args.model_dir.resolve(), args.higgs_dir, 8,
                              voices / f"now-pin{seconds:g}", args.threads, ("--pin-seconds", str(seconds))))
    results: dict = {}

    def record(key, server, value):
        results.setdefault(key, {}).setdefault(server.name, []).append(value)

    try:
        for server in servers:
            server.start()
        # cold: the first request after a restart; the voices folder (and any pin kept there) stays
        for _ in range(args.cold):
            for server in [s for s in servers if s.name != "now-mb1"]:
                timed_speech_request(server.url, args.num_steps[0], 0, WORKLOADS["2 s reply"])  # pins, kept on disk
                server.stop()
                server.start()
                record(("2 s reply", 1, args.num_steps[0], "cold"), server,
                       concurrent_requests(server.url, 1, args.num_steps[0], WORKLOADS["2 s reply"]))
        for workload in args.workloads:
            text = WORKLOADS[workload]
            for num_steps in args.num_steps:
                crowd = any(c > 1 for c in args.clients) and (not args.four_steps or num_steps in args.four_steps)
                for server in servers:
                    if server.name != "now-mb1" or crowd:
                        timed_speech_request(server.url, num_steps, 0, text)  # warm for this workload
                for clients in args.clients:
                    if clients > 1 and args.four_steps and num_steps not in args.four_steps:
                        continue
                    for _ in range(args.rounds if clients == 1 else args.crowd_rounds):
                        for server in servers:
                            if (clients == 1 and server.name == "now-mb1") or (
                                    clients > 1 and server.name.startswith("now-pin")):
                                continue
                            value = concurrent_requests(server.url, clients, num_steps, text)
                            record((workload, clients, num_steps, "warm"), server, value)
                            print(workload, clients, num_steps, server.name,
                                  {k: np.round(v, 2).tolist() for k, v in value.items()}, flush=True)
    finally:
        for server in servers:
            if server.proc is not None:
                server.stop()

    info = machine()
    lines = [f"# Time to first audio: `{args.model_dir.name}`, this checkout against `{args.base.name}`", "",
             f"{machine_line(info)}. Streamed pcm, voice alloy, seeded; first audio is the first body bytes. "
             f"`base`: the other checkout, --max-batch 8; `now`: this one, --max-batch 8; `now-mb1`: this one, "
             f"--max-batch 1. Warm rows: {args.rounds} interleaved rounds after one warming request; cold: the first "
             f"request after a restart. Throughput: audio seconds per wall second. Made by `bench/latency_bench.py`.", "",
             "| workload | clients | steps | start | server | first audio p50 / p95 (s) | total p50 / p95 (s) "
             "| throughput | first audio vs base |", "|---|---|---|---|---|---|---|---|---|"]
    table = {}
    for (workload, clients, num_steps, kind), by_server in results.items():
        base = summary(by_server["base"]) if "base" in by_server else None
        for name, rounds in by_server.items():
            s = summary(rounds)
            table[f"{workload}|{clients}|{num_steps}|{kind}|{name}"] = s
            ratio = f"{s['first_p50'] / base['first_p50']:.2f}x" if base and name != "base" else ""
            lines.append(f"| {workload} | {clients} | {num_steps} | {kind} | {name} | {s['first_p50']:.2f} / "
                         f"{s['first_p95']:.2f} | {s['total_p50']:.2f} / {s['total_p95']:.2f} | {s['throughput']:.2f} "
                         f"| {ratio} |")
    write_page(args.out, lines, {"machine": info, "args": vars(args) | {
        "model_dir": str(args.model_dir), "higgs_dir": str(args.higgs_dir), "base": str(args.base),
        "out": str(args.out)}, "results": table})
    return 0


if __name__ == "__main__":
    sys.exit(main())
