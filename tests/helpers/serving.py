"""serve.py as a user runs it, for the server tests: a real process on a loopback port, its log, and a client."""

from __future__ import annotations

import itertools
import os
import random
import re
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import openai

from helpers.scripts import ROOT

RATE = 24000
FAST = {"num_steps": 4}
TWO_SENTENCES = "Hello there, this is the first sentence. And here comes a second one, a little longer."


def many_sentences(count: int) -> str:
    """`count` numbered sentences of about 3 s each: a request long enough to still be running."""
    return " ".join(f"Sentence number {i} goes on for a while so that it takes some time." for i in range(count))


# Ports handed out below Linux's ephemeral range (32768-60999, where bind(0) and clients' own ports come
# from) and above Ray's worker ports (10002-19999), a block for each xdist worker: a port chosen here is
# not taken by a neighbour before its server binds it.
PORT_BLOCK = 1500
_ports = itertools.count(random.randrange(PORT_BLOCK))


def free_port() -> int:
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0")[2:] or 0)
    base = 20000 + PORT_BLOCK * (worker % 8)
    for _ in range(PORT_BLOCK):
        port = base + next(_ports) % PORT_BLOCK
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {base}-{base + PORT_BLOCK - 1}")


class Server:
    def __init__(self, build: Path, voices_dir: Path, log_path: Path, *extra: str, env: dict | None = None,
                 port: int | None = None):
        self.port = port or free_port()
        self.voices_dir = voices_dir
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "serve.py"), "--model_dir", str(build), "--port", str(self.port),
             "--voices_dir", str(voices_dir), *extra],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=self.log, text=True, env={**os.environ, **(env or {})},
            preexec_fn=ctrl_c_as_a_terminal_sends_it)
        self.early_lines: list[str] = []  # what it printed before its ready line
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"serve.py exited {self.proc.returncode}:\n{log_path.read_text()}")
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            line = self.proc.stdout.readline() if ready else ""
            if line.strip() and not line.startswith("ready: "):
                self.early_lines.append(line.strip())
            if line.startswith("ready: "):
                self.ready_line = line.strip()
                return
        self.stop()
        raise AssertionError(f"serve.py printed no ready line:\n{log_path.read_text()}")

    def client(self, key: str = "unused", **kwargs) -> "openai.OpenAI":
        return openai.OpenAI(base_url=f"{self.url}/v1", api_key=key, max_retries=0, **kwargs)

    def log_lines(self, start: int = 0) -> list[str]:
        self.log.flush()
        return self.log_path.read_text().splitlines()[start:]

    def request_lines(self, start: int = 0) -> list[dict]:
        """The per-request log lines as dicts (key=value pairs)."""
        return [dict(re.findall(r"(\w+)=(\S+)", line)) for line in self.log_lines(start) if " speech request=" in line]

    def door_lines(self, door: str, start: int = 0, count: int = 1, wait: float = 120,
                   missing: str = "too few request lines in the log") -> list[dict]:
        """One door's request lines from `start`, once there are `count`; past `wait` s, `missing` and the log."""
        deadline = time.monotonic() + wait
        while len(lines := [line for line in self.request_lines(start) if line["door"] == door]) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"{missing}:\n" + "\n".join(self.log_lines(start)))
            time.sleep(0.05)
        return lines

    def stop(self):
        self.proc.kill()
        self.proc.wait(timeout=30)
        self.log.close()


def started(build: Path, tmp_path_factory, name: str, *flags: str, wyoming: bool = False, mcp_output: bool = False):
    """A module's server (a fixture's body: `yield from started(...)`): serve.py on `build` with `flags`, its
    voices and log in a folder of its own (srv.folder); with `wyoming` a Wyoming door on a free port
    (srv.wyoming_port), with `mcp_output` MCP's output folder (srv.out); stopped when the module is done."""
    folder = tmp_path_factory.mktemp(name)
    port = free_port() if wyoming else None
    extra = (("--wyoming-uri", f"tcp://127.0.0.1:{port}") if wyoming else ()) + \
        (("--mcp-output-dir", str(folder / "out")) if mcp_output else ())
    srv = Server(build, folder / "voices", folder / "server.log", *extra, *flags)
    srv.folder, srv.wyoming_port, srv.out = folder, port, folder / "out"
    try:
        yield srv
    finally:
        srv.stop()


def speak(srv: Server, text: str = TWO_SENTENCES, voice: str = "alloy", fmt: str = "pcm", **extra) -> bytes:
    return srv.client().audio.speech.create(model="omnivoice", input=text, voice=voice, response_format=fmt,
                                            extra_body={**FAST, **extra}).content


def pcm_samples(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2")


def whole_response(data: bytes) -> bool:
    """An HTTP/1.1 answer's headers and as much body as its Content-Length says are all in `data`."""
    head, found, body = data.partition(b"\r\n\r\n")
    if not found:
        return False
    length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length:")), 0)
    return len(body) >= length


STAGE_WAIT_S = 180  # the most a start is waited for to reach a stage (a local Ray and a model on two busy cores)


def ctrl_c_as_a_terminal_sends_it() -> None:
    """In serve.py's process, before it starts: SIGINT's default action. A suite started in the background (nohup,
    or `&` in a shell without job control) hands its children SIGINT ignored, and Python then never turns one into
    KeyboardInterrupt: serve.py would drain and end 0, not 130 as it does under Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def signal_at_stage(args: list, log_path: Path, stage, sig: int, env: dict | None = None,
                    wait: float = 60) -> tuple[int, float, str]:
    """serve.py with `args`, sent `sig` once it reaches `stage` (a string its output shows, or a check that turns
    true): (its exit status, seconds from the signal to its end, its output). It must end within `wait` s."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, str(ROOT / "serve.py"), *map(str, args)], cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
                                preexec_fn=ctrl_c_as_a_terminal_sends_it)
        reached = stage if callable(stage) else (lambda: stage in log_path.read_text())
        try:
            deadline = time.monotonic() + STAGE_WAIT_S
            while not reached() and proc.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            assert reached(), log_path.read_text()[-2000:]
            proc.send_signal(sig)
            sent = time.monotonic()
            try:
                status = proc.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                raise AssertionError(f"serve.py still ran {wait:g} s after the signal:\n"
                                     f"{log_path.read_text()[-2000:]}") from None
            return status, time.monotonic() - sent, log_path.read_text()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
