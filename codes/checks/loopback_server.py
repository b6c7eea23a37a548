"""What the serving benchmarks (bench/serve_bench.py, latency_bench.py, http_bounds_bench.py, wyoming_bench.py,
soak.py, bargein.py) share: serve.py started as a user starts it, on a free port of 127.0.0.1, stopped again,
and one streamed speech request timed against it."""

from __future__ import annotations

import select
import signal
import socket
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from codes.runtime.contract.specs import SAMPLE_RATE

ROOT = Path(__file__).resolve().parents[2]  # this checkout, which holds serve.py
TWO_SENTENCES = ("The server streams each sentence as soon as it is ready. "
                 "Concurrent clients share every decoding step.")


def loopback_port() -> int:
    """A port free on 127.0.0.1 now, for a server a bench starts."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(model_dir: Path, max_batch: int, voices: Path, threads: int | None, higgs_dir: Path | None = None,
                 root: Path = ROOT, extra: tuple[str, ...] = ()) -> tuple[subprocess.Popen, str]:
    """serve.py of the checkout at `root` on a free loopback port, once it prints its ready line: its process and
    URL. Its stderr goes to `<voices>-server-<port>.log` beside the voices folder, kept to say why, should it not
    start."""
    port = loopback_port()
    args = [sys.executable, str(root / "serve.py"), "--model_dir", str(model_dir), "--port", str(port),
            "--voices_dir", str(voices), "--max-batch", str(max_batch)]
    args += ["--threads", str(threads)] if threads else []
    if higgs_dir:
        args += ["--higgs_dir", str(higgs_dir)]
    args += list(extra)
    log = open(voices.parent / f"{voices.name}-server-{port}.log", "w")
    proc = subprocess.Popen(args, cwd=root, stdout=subprocess.PIPE, stderr=log, text=True)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        if select.select([proc.stdout], [], [], 0.5)[0] and proc.stdout.readline().startswith("ready: "):
            return proc, f"http://127.0.0.1:{port}"
        if proc.poll() is not None:
            break
    proc.kill()
    raise SystemExit(f"serve.py did not start; its log: {log.name}")


def stop_server(proc: subprocess.Popen) -> None:
    """Ctrl-C, as a user stops it (serve.py --ray then stops its Ray too); killed if it does not end."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def timed_speech_request(url: str, num_steps: int, seed: int, text: str = TWO_SENTENCES) -> tuple[float, float, float]:
    """(first audio, total, audio seconds) of one streamed pcm request, voice alloy."""
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
    return first, time.perf_counter() - start, size / 2 / SAMPLE_RATE  # s16le mono


def concurrent_requests(url: str, clients: int, num_steps: int, text: str = TWO_SENTENCES) -> dict:
    """`clients` timed requests at once, client i with seed i: each one's first audio and total, the audio
    seconds of all and the wall time they took together."""
    began = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        results = list(pool.map(lambda i: timed_speech_request(url, num_steps, i, text), range(clients)))
    firsts, totals, audio = zip(*results)
    return {"first": list(firsts), "total": list(totals), "audio_s": float(sum(audio)),
            "wall_s": time.perf_counter() - began}
