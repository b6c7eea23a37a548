#!/usr/bin/env python3
"""A bounded soak of serve.py on loopback: mixed normal, disconnecting and hostile clients for N minutes.

  .venv/bin/python bench/soak.py --model_dir models/tiny-cpu_int8 --minutes 10 --clients 6 --out bench/soak_results.md

Each client loops until the deadline, picking per iteration (seeded) a streamed speech request, a
disconnect, a hostile request (upload bombs among them), an upload-speak-delete cycle, GET /health, or
a Wyoming call on the same server: a request or a stream of one-character chunks with the `wyoming`
package's client, or a hostile raw socket (lengths that claim a terabyte, a stream that sends no text,
a client that never reads). Any 4xx/5xx (or the expected error event) to a hostile request is a
refusal; to a valid one only 429/503 are (busy), anything else is an unexpected error.
A call past --timeout is HUNG, the headline number (should be 0). The server's VmRSS is sampled every 10 s.
Exit code 0 whatever the server did: the numbers tell.
"""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import random
import socket
import sys
import tempfile
import threading
import time
import wave
from collections import Counter
from pathlib import Path

import httpx
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from wyoming.client import AsyncTcpClient  # noqa: E402
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice  # noqa: E402

from codes.checks.hostile_clips import lying_matroska, silent_flac, with_flac_length  # noqa: E402
from codes.checks.loopback_server import loopback_port, start_server  # noqa: E402
from codes.checks.results_page import bench_parser, machine, machine_line, write_page # noqa: E402

SENTENCES = ("The morning train was late again.", "She opened the window and listened to the rain.",
             "Nobody expected the meeting to last three hours.", "Please check the figures before Friday.",
             "The garden looks different in autumn light.", "He laughed, then told the story once more.")
FORMATS, VOICES = ("pcm", "mp3", "wav", "opus"), ("alloy", "nova", "onyx", "soak-saved")
MAGIC = {"wav": b"RIFF", "opus": b"OggS"}
ACTIONS = {"speech": 40, "disconnect": 12, "hostile": 13, "upload": 8, "health": 12,
           "wyoming": 8, "wyoming-hostile": 7}  # weights per iteration
WYOMING_LIMITS = ("--wyoming-idle-seconds", "5", "--wyoming-write-seconds", "5")  # short, so its cases end quickly
TERABYTE = 10 ** 12
BUSY = (429, 503)  # a valid request may be turned away while the server is loaded; that is not a bug
WARMUP_S, RSS_EVERY_S = 120.0, 10.0  # arenas grow to the mixed load's shapes for about two minutes


class TooSlow(Exception):  # the whole call, not one read, went past --timeout
    pass


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.ok, self.refused, self.unexpected, self.conn_errors, self.hung = (Counter() for _ in range(5))
        self.health_ms = []

    def add(self, counter: str, key, value=1):
        with self.lock:
            getattr(self, counter)[key] += value


def exchange(client: httpx.Client, method: str, path: str, timeout: float, first_only=False, **kw):
    """(status, body) of one streamed call read to its end (or its first chunk), within `timeout` in all."""
    began = time.monotonic()
    with client.stream(method, path, **kw) as response:
        body = bytearray()
        for chunk in response.iter_raw():
            body += chunk
            if time.monotonic() - began > timeout:
                raise TooSlow
            if first_only and body:
                break
        return response.status_code, bytes(body)


def error_message(body: bytes) -> str:
    try:
        return json.loads(body)["error"]["message"][:100]
    except Exception:
        return body[:100].decode("utf-8", "replace")


def judge(tally: Tally, kind: str, status: int, body: bytes, problem: str | None = None, hostile=False):
    if status == 200 and problem is None:
        tally.add("ok", kind)
    elif status >= 400 and (hostile or status in BUSY):
        tally.add("refused", f"{kind}: {status}")
    else:
        tally.add("unexpected", f"{kind}: {status} {problem or error_message(body)}")


def speech_body(rng: random.Random, voice: str, fmt: str, stream_format: str) -> dict:
    text = " ".join(rng.sample(SENTENCES, rng.randint(1, 3)))
    return {"model": "omnivoice", "input": text, "voice": voice, "response_format": fmt,
            "stream_format": stream_format, "num_steps": rng.randint(4, 8), "seed": rng.randrange(2**31)}


def check_audio(body: bytes, fmt: str, stream_format: str) -> str | None:
    if not body:
        return "empty body"
    if stream_format == "sse":
        events = [line[6:] for line in body.decode("utf-8", "replace").splitlines() if line.startswith("data: ")]
        return None if events and json.loads(events[-1]).get("type") == "speech.audio.done" else "no speech.audio.done"
    return None if body.startswith(MAGIC.get(fmt, b"")) else f"{fmt} body starts {body[:4]!r}"


def speech(client, tally, rng, timeout, voice=None, kind="speech"):
    fmt, stream_format = rng.choice(FORMATS), rng.choice(("audio", "sse"))
    status, body = exchange(client, "POST", "/v1/audio/speech", timeout,
                            json=speech_body(rng, voice or rng.choice(VOICES), fmt, stream_format))
    judge(tally, kind, status, body, check_audio(body, fmt, stream_format) if status == 200 else None)


def disconnect(client, tally, rng, timeout, port: int):
    body = speech_body(rng, rng.choice(VOICES), "pcm", "audio")
    if rng.random() < 0.5:  # after the first chunk of audio
        status, data = exchange(client, "POST", "/v1/audio/speech", timeout, first_only=True, json=body)
        if status != 200:
            return judge(tally, "disconnect", status, data)
    else:  # before any audio: the server answers only with its first audio, so hang up on the raw socket
        payload = json.dumps(body).encode()
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
            sock.sendall(b"POST /v1/audio/speech HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n" % len(payload) + payload)
            time.sleep(rng.uniform(0.01, 1.0))
    tally.add("ok", "disconnect")


def wav_bytes(pcm: bytes) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(24000), w.writeframes(pcm)
    return out.getvalue()


def hostile_catalogue(clip: bytes, seed: int) -> dict:
    """hostile kind -> (fresh voice name -> (path, httpx keyword arguments)); bodies are built once."""
    def speak(**extra):
        payload = json.dumps({"model": "omnivoice", "input": "Hello there.", "voice": "alloy", "num_steps": 4}
                             | extra).encode()  # once: a 20 MB dump per call would load the client, not the server
        return lambda name: ("/v1/audio/speech", {"content": payload, "headers": {"content-type": "application/json"}})

    def upload(data: bytes, text="Hello there."):
        return lambda name: ("/v1/audio/voices", {"files": {"file": ("clip.wav", data, "audio/wav")},
                                                  "data": {"text": text, "name": name}})

    rng = random.Random(seed)
    words = " ".join("".join(rng.choice("abcdefghij") for _ in range(rng.randint(2, 9))) for _ in range(600))
    big_wav = wav_bytes(rng.randbytes(25 << 20))  # ~9 minutes of noise that every decoder reads
    bomb = silent_flac(300)  # 8 channels at 192 kHz: 1.8 GB as float32, under 500 KB as FLAC
    return {"huge-instructions": speak(instructions="x" * (4 << 20)), "duration-1e308": speak(duration=1e308),
            "num_steps-1e9": speak(num_steps=10**9), "unknown-voice": speak(voice="no-such-voice-here"),
            "huge-input": speak(input="word " * 20000), "no-punctuation": speak(input=words[:3000]),
            "cjk-run": speak(input="".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(1500))),
            "20MB-body": speak(user="x" * (20 << 20)),  # `user` is accepted and ignored: only a body limit stops it
            "invalid-json": lambda name: ("/v1/audio/speech", {"content": b'{"input": "Hello', "headers": {
                "content-type": "application/json"}}),
            "upload-garbage": upload(rng.randbytes(64 << 10)), "upload-25MB": upload(big_wav),
            "upload-10k-transcript": upload(clip, "word " * 2000), "upload-flac-bomb": upload(bomb),
            "upload-flac-bomb-no-length": upload(with_flac_length(bomb, 0)),
            "upload-matroska-lying-length": upload(lying_matroska(bomb, 1.0))}


def hostile(client, tally, rng, timeout, catalogue: dict, name: str):
    which = rng.choice(sorted(catalogue))
    path, kw = catalogue[which](name)
    status, body = exchange(client, "POST", path, timeout, **kw)
    judge(tally, f"hostile/{which}", status, body, hostile=True)
    if status == 200 and path == "/v1/audio/voices":  # accepted: do not let the folder grow
        exchange(client, "DELETE", f"/v1/audio/voices/{json.loads(body)['id']}", timeout)


def upload_cycle(client, tally, rng, timeout, clip: bytes, name: str):
    status, body = exchange(client, "POST", "/v1/audio/voices", timeout, data={"text": SENTENCES[0], "name": name},
                            files={"file": ("clip.wav", clip, "audio/wav")})
    judge(tally, "upload/add", status, body)
    if status == 200:
        vid = json.loads(body)["id"]
        speech(client, tally, rng, timeout, voice=vid, kind="upload/speak")
        status, body = exchange(client, "DELETE", f"/v1/audio/voices/{vid}", timeout)
        judge(tally, "upload/delete", status, body)


def wyoming_call(tally, rng, timeout, port: int):
    """A request, or a stream sent one character per chunk, through the official client."""
    text = " ".join(rng.sample(SENTENCES, rng.randint(1, 2)))
    one_chars = rng.random() < 0.5
    kind = "wyoming/1-char-stream" if one_chars else "wyoming/speak"

    async def call():
        async with AsyncTcpClient("127.0.0.1", port) as client:
            voice = SynthesizeVoice(name=rng.choice(VOICES))
            if one_chars:
                await client.write_event(SynthesizeStart(voice=voice).event())
                for char in text:
                    await client.write_event(SynthesizeChunk(text=char).event())
                await client.write_event(SynthesizeStop().event())
            else:
                await client.write_event(Synthesize(text=text, voice=voice).event())
            types = []
            while True:
                event = await client.read_event()
                if event is None:
                    return types
                types.append(event.type)
                if event.type in ("error", "synthesize-stopped") or (event.type == "audio-stop" and not one_chars):
                    return types

    try:
        types = asyncio.run(asyncio.wait_for(call(), timeout))
    except asyncio.TimeoutError:
        raise TooSlow from None
    if "audio-stop" in types:
        tally.add("ok", kind)
    elif "error" in types:
        tally.add("refused", f"{kind}: error event")  # busy: the same 429 as HTTP
    else:
        tally.add("unexpected", f"{kind}: events {types[:6]}")


def wyoming_hostile(tally, rng, timeout, port: int):
    """A raw socket: (what it sends, the error code the server must answer with, or None for a client
    that never reads and is simply let go)."""
    which = rng.choice(("payload-bomb", "data-bomb", "idle-stream", "never-reads"))
    header = {"payload-bomb": {"type": "describe", "payload_length": TERABYTE},
              "data-bomb": {"type": "synthesize", "data_length": TERABYTE},
              "idle-stream": {"type": "synthesize-start", "data": {"voice": {"name": "alloy"}}},
              "never-reads": {"type": "synthesize", "data": {"text": " ".join(SENTENCES * 4)}}}[which]
    expected = {"payload-bomb": "event_too_large", "data-bomb": "event_too_large", "idle-stream": "idle_timeout"}
    with socket.socket() as sock:
        if which == "never-reads":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.settimeout(timeout)
        sock.connect(("127.0.0.1", port))
        sock.sendall(json.dumps(header).encode() + b"\n" + (b"\0" * (1 << 20) if "bomb" in which else b""))
        if which == "never-reads":  # the server lets it go after --wyoming-write-seconds; nothing to read
            time.sleep(float(WYOMING_LIMITS[3]) + 1)
            return tally.add("refused", f"wyoming-hostile/{which}: let go")
        reader = sock.makefile("rb")
        while True:
            line = reader.readline()
            if not line:
                return tally.add("unexpected", f"wyoming-hostile/{which}: closed without an error event")
            event = json.loads(line)
            if event.get("data_length"):
                event.setdefault("data", {}).update(json.loads(reader.read(event["data_length"])))
            if event.get("type") == "error":
                code = event.get("data", {}).get("code")
                if code == expected[which] or code == "too_many_connections":
                    return tally.add("refused", f"wyoming-hostile/{which}: {code}")
                return tally.add("unexpected", f"wyoming-hostile/{which}: error {code}")


def health(client, tally, timeout):
    began = time.perf_counter()
    status, body = exchange(client, "GET", "/health", timeout)
    tally.health_ms.append((time.perf_counter() - began) * 1000)
    judge(tally, "health", status, body)


def client_loop(index: int, url: str, wyoming_port: int, deadline: float, tally: Tally, args, clip: bytes,
                catalogue: dict):
    rng = random.Random(args.seed * 1000 + index)
    port = httpx.URL(url).port
    with httpx.Client(base_url=url, timeout=args.timeout) as client:
        for i in itertools.count():
            if time.monotonic() >= deadline:
                return
            action = rng.choices(list(ACTIONS), weights=list(ACTIONS.values()))[0]
            name = f"soak-{index}-{i}"
            try:
                {"speech": lambda: speech(client, tally, rng, args.timeout),
                 "disconnect": lambda: disconnect(client, tally, rng, args.timeout, port),
                 "hostile": lambda: hostile(client, tally, rng, args.timeout, catalogue, name),
                 "upload": lambda: upload_cycle(client, tally, rng, args.timeout, clip, name),
                 "health": lambda: health(client, tally, args.timeout),
                 "wyoming": lambda: wyoming_call(tally, rng, args.timeout, wyoming_port),
                 "wyoming-hostile": lambda: wyoming_hostile(tally, rng, args.timeout, wyoming_port)}[action]()
            except (httpx.TimeoutException, TooSlow, socket.timeout):
                tally.add("hung", action)
            except (httpx.TransportError, OSError) as exc:
                tally.add("conn_errors", f"{action}: {type(exc).__name__}")
                time.sleep(0.2)  # a dead server must not turn this into a busy loop
            except Exception as exc:  # a response this client did not expect (e.g. a 200 that is not JSON)
                tally.add("unexpected", f"{action}: client {type(exc).__name__}: {exc}"[:140])


def vm_rss_mb(pid: int) -> float | None:
    try:
        lines = [x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:")]
    except OSError:  # gone
        return None
    return int(lines[0].split()[1]) / 1024 if lines else None  # a zombie has no VmRSS line


def percentile(values, q):
    return float(np.percentile(values, q)) if values else float("nan")


def report(args, tally: Tally, rss: list, duration: float, warmup: float, final: dict, log: Path) -> tuple[list, dict]:
    settled = [(t, mb) for t, mb in rss if t >= warmup and mb is not None]
    start_mb, end_mb = (settled[0][1], settled[-1][1]) if settled else (float("nan"),) * 2
    mid_mb = min(settled, key=lambda s: abs(s[0] - (warmup + duration) / 2))[1] if settled else float("nan")
    health = {"n": len(tally.health_ms), "p50_ms": percentile(tally.health_ms, 50),
              "p99_ms": percentile(tally.health_ms, 99), "max_ms": max(tally.health_ms, default=float("nan"))}
    data = {"machine": machine(), "model_dir": str(args.model_dir), "minutes": args.minutes, "clients": args.clients,
            "seed": args.seed, "timeout_s": args.timeout, "hung": sum(tally.hung.values()), "hung_by_kind": tally.hung,
            "connection_errors": tally.conn_errors, "disconnects": tally.ok["disconnect"], "ok": tally.ok,
            "refused": tally.refused, "unexpected": tally.unexpected, "health": health, "final": final,
            "rss_mb": {"after_warmup": start_mb, "middle": mid_mb, "end": end_mb,
                       "growth_pct": (end_mb - start_mb) / start_mb * 100, "samples": rss},
            "server_log_tracebacks": log.read_text(errors="replace").count("Traceback") if log.exists() else None}
    info = data["machine"]
    kinds = sorted(set(tally.ok) | {k.split(": ")[0] for k in tally.refused})
    lines = [f"# serve.py soak: `{args.model_dir.name}`, {args.minutes:g} min, {args.clients} clients", "",
             f"{machine_line(info)}; seed "
             f"{args.seed}, timeout {args.timeout:g} s per call. Made by `bench/soak.py`.", "",
             f"**HUNG: {data['hung']}**{f' {dict(tally.hung)}' if tally.hung else ''} · connection errors: "
             f"{sum(tally.conn_errors.values())} · unexpected errors: {sum(tally.unexpected.values())} · "
             f"disconnects made: {data['disconnects']} · "
             f"server alive at the end: {final['alive']}, /health {final['health_status']} · tracebacks in the "
             f"server log: {data['server_log_tracebacks']}", "",
             "| kind | ok (accepted) | refused (status x count) |", "|---|---|---|"]
    for kind in kinds:
        refusals = ", ".join(f"{k.split(': ')[1]} x{n}" for k, n in sorted(tally.refused.items())
                             if k.split(": ")[0] == kind)
        lines.append(f"| {kind} | {tally.ok.get(kind, 0)} | {refusals} |")
    for title, counter in (("Unexpected errors", tally.unexpected), ("Connection errors", tally.conn_errors)):
        lines += ["", f"{title}:" + ("" if counter else " none")] + [f"- {k} x{n}" for k, n in sorted(counter.items())]
    lines += ["", f"/health: {health['n']} calls, p50 {health['p50_ms']:.1f} ms, p99 {health['p99_ms']:.1f} ms, "
                  f"max {health['max_ms']:.1f} ms.", "",
              "| server VmRSS | after warm-up | middle | end | growth |", "|---|---|---|---|---|",
              f"| MB | {start_mb:.0f} | {mid_mb:.0f} | {end_mb:.0f} | {data['rss_mb']['growth_pct']:+.1f}% |"]
    return lines, data


def main() -> int:
    p = bench_parser(__doc__)
    p.add_argument("--model_dir", type=Path, default=ROOT / "models/tiny-cpu_int8")
    p.add_argument("--higgs_dir", type=Path, help="a codec folder, for a model folder that has none")
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--clients", type=int, default=6)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-batch", dest="max_batch", type=int, default=8)
    p.add_argument("--threads", type=int)
    p.add_argument("--timeout", type=float, default=120.0, help="seconds one call may take before it counts as HUNG")
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    voices = Path(tempfile.mkdtemp(prefix="soak-")) / "voices"
    wyoming_port = loopback_port()
    proc, url = start_server(args.model_dir.resolve(), args.max_batch, voices, args.threads, args.higgs_dir,
                      extra=("--wyoming-uri", f"tcp://127.0.0.1:{wyoming_port}", *WYOMING_LIMITS))
    log = next(voices.parent.glob("voices-server-*.log"))
    tally, rss, stop = Tally(), [], threading.Event()
    try:
        with httpx.Client(base_url=url, timeout=args.timeout) as client:  # the clip also pins alloy before the clock
            _, pcm = exchange(client, "POST", "/v1/audio/speech", args.timeout, json={
                "model": "omnivoice", "input": SENTENCES[1], "voice": "alloy", "response_format": "pcm", "seed": 1})
            clip = wav_bytes(pcm)
            client.post("/v1/audio/voices", data={"text": SENTENCES[1], "name": "soak-saved"},
                        files={"file": ("clip.wav", clip, "audio/wav")}).raise_for_status()
        catalogue = hostile_catalogue(clip, args.seed)
        duration = args.minutes * 60
        warmup, began = min(WARMUP_S, duration / 2), time.monotonic()
        deadline = began + duration

        def sample():
            while True:
                rss.append((round(time.monotonic() - began, 1), vm_rss_mb(proc.pid)))
                if stop.wait(RSS_EVERY_S):
                    return

        threading.Thread(target=sample, daemon=True).start()
        workers = [threading.Thread(target=client_loop, args=(i, url, wyoming_port, deadline, tally, args, clip, catalogue),
                                    daemon=True) for i in range(args.clients)]  # daemon: a stuck call cannot block exit
        for worker in workers:
            worker.start()
        while time.monotonic() < deadline:
            time.sleep(min(60.0, max(0.0, deadline - time.monotonic())))
            print(f"{time.monotonic() - began:5.0f} s: ok {sum(tally.ok.values())}, refused "
                  f"{sum(tally.refused.values())}, unexpected {sum(tally.unexpected.values())}, hung "
                  f"{sum(tally.hung.values())}, rss {rss[-1][1] or 0:.0f} MB", flush=True)
        grace = time.monotonic() + 2 * args.timeout + 10  # a stream may take a read timeout past its total
        for worker in workers:
            worker.join(max(0.0, grace - time.monotonic()))
        stuck = sum(worker.is_alive() for worker in workers)
        if stuck:
            tally.add("hung", "client still waiting after the grace period", stuck)
        stop.set()
        try:
            status = httpx.get(f"{url}/health", timeout=10).status_code
        except httpx.HTTPError as exc:
            status = type(exc).__name__
        final = {"alive": proc.poll() is None, "health_status": status}
    finally:
        proc.kill()
        proc.wait()
    lines, data = report(args, tally, rss, duration, warmup, final, log)
    write_page(args.out, lines, data)
    print(f"server log: {log}\nHUNG: {data['hung']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
