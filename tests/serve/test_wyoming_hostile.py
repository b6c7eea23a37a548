"""The Wyoming door against clients that try to take the server down (issue 27): lengths that claim
a terabyte, streams that never send text, clients that never read, a second synthesize-start, more
connections than allowed. Each hostile client is a raw socket on loopback against one real serve.py
on the tiny build; after each, an ordinary HTTP request (httpx) and an ordinary Wyoming request (the
`wyoming` package's client) must still be served."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import time
from types import SimpleNamespace

import httpx
import pytest
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice

from codes.serve.doors.wyoming import WyomingDoor
from codes.serve.edge.limits import Limits
from helpers.scripts import last_error_line, run_script
from helpers.serving import Server, free_port, many_sentences, started

WAIT = 60  # seconds a test waits for an event before it fails
MAX_CONCURRENT = 4
MAX_CONNECTIONS = 6
IDLE_SECONDS = 3  # long enough for a test to open its connections, short enough to wait out
WRITE_SECONDS = 2
BOMB = 10 ** 12  # the length a hostile header claims: a terabyte


@pytest.fixture(scope="module")
def server(served_build, tmp_path_factory):
    yield from started(served_build, tmp_path_factory, "wyoming-hostile", "--num-steps", "4", "--max-concurrent",
                       str(MAX_CONCURRENT), "--wyoming-max-connections", str(MAX_CONNECTIONS),
                       "--wyoming-idle-seconds", str(IDLE_SECONDS), "--wyoming-write-seconds", str(WRITE_SECONDS),
                       wyoming=True)


class Raw:
    """A hostile client: bytes as it chooses to send them, events read by hand."""

    def __init__(self, port: int, receive_buffer: int | None = None):
        self.sock = socket.socket()
        if receive_buffer:  # set before connecting, so the window the server sees is small from the start
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(WAIT)
        self.sock.connect(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")

    def send(self, header: dict, data: bytes = b"") -> None:
        self.sock.sendall(json.dumps(header).encode() + b"\n" + data)

    def event(self) -> dict | None:
        """The next event as its header with `data` merged in, or None once the server has closed."""
        try:
            line = self.file.readline()
        except ConnectionError:
            return None
        if not line:
            return None
        header = json.loads(line)
        if header.get("data_length"):
            header.setdefault("data", {}).update(json.loads(self.file.read(header["data_length"])))
        if header.get("payload_length"):
            self.file.read(header["payload_length"])
        return header

    def closed(self) -> bool:
        """Reads to the end: True once the server has closed the connection (never a guess by time)."""
        while self.event() is not None:
            pass
        return True

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        line = next(line for line in status if line.startswith("VmRSS:"))
    return int(line.split()[1]) * 1024


def health(srv: Server) -> dict:
    return httpx.get(f"{srv.url}/health", timeout=WAIT).json()


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {WAIT} s")


def still_serving(srv: Server) -> None:
    """An ordinary HTTP request and an ordinary Wyoming request both get their audio."""
    spoken = httpx.post(f"{srv.url}/v1/audio/speech", timeout=WAIT, json={
        "model": "tts-1", "input": "Still here.", "voice": "alloy", "response_format": "pcm", "num_steps": 4})
    assert spoken.status_code == 200 and spoken.content, spoken.text

    async def once():
        async with AsyncTcpClient("127.0.0.1", srv.wyoming_port) as client:
            await client.write_event(Synthesize(text="Still here.", voice=SynthesizeVoice(name="alloy")).event())
            types = []
            while not types or types[-1] != "audio-stop":
                event = await client.read_event()
                assert event is not None and event.type != "error", (types, event)
                types.append(event.type)
            return types

    types = asyncio.run(asyncio.wait_for(once(), WAIT))
    assert types[0] == "audio-start" and "audio-chunk" in types


@pytest.mark.parametrize("header", [{"type": "describe", "payload_length": BOMB},
                                    {"type": "synthesize", "data_length": BOMB},
                                    {"type": "synthesize", "data_length": 2 << 20}],  # past --max-body-bytes
                         ids=["payload", "data", "data-over-body-limit"])
def test_a_length_past_its_cap_is_refused_before_it_is_read(server, header):
    """The error comes right after the header, before a byte of what it claims; the server then
    closes, so the zeros that follow cannot grow its memory (513 MiB for 256 MiB before the fix)."""
    rss_before = rss_bytes(server.proc.pid)
    client = Raw(server.wyoming_port)
    client.send(header)
    refused = client.event()
    assert refused["type"] == "error" and refused["data"]["code"] == "event_too_large", refused
    assert str(max(header.get("payload_length", 0), header.get("data_length", 0))) in refused["data"]["text"]
    sent, zeros = 0, bytes(1 << 20)
    with pytest.raises(OSError):  # the server has closed: the kernel soon refuses more
        while sent < 256 << 20:
            client.sock.sendall(zeros)
            sent += len(zeros)
    client.close()
    assert rss_bytes(server.proc.pid) - rss_before < 32 << 20
    still_serving(server)


def test_a_header_line_past_its_cap_and_a_header_that_is_no_event_are_refused(server):
    endless = Raw(server.wyoming_port)
    endless.sock.sendall(b'{"type": "describe", "pad": "' + b"x" * (256 << 10))  # no newline: the line never ends
    refused = endless.event()
    assert refused["type"] == "error" and refused["data"]["code"] == "event_too_large", refused
    assert endless.closed()
    endless.close()
    for garbage in (b"[1, 2]\n", b'{"data": {}}\n', b'{"type": "describe", "payload_length": -5}\n'):
        client = Raw(server.wyoming_port)
        client.sock.sendall(garbage)
        refused = client.event()
        assert refused["type"] == "error" and refused["data"]["code"] == "bad_event", (garbage, refused)
        assert client.closed()
        client.close()
    still_serving(server)


def test_streams_that_never_send_text_hold_no_slot_and_are_closed_after_the_idle_timeout(server):
    """As many synthesize-starts with nothing after them as there are slots: they hold none (HTTP is
    served beside them), and the idle timeout closes each with an error event."""
    start = len(server.log_lines())
    idle = [Raw(server.wyoming_port) for _ in range(MAX_CONCURRENT)]
    for client in idle:  # describe's answer shows the server has read the start before it
        client.send({"type": "synthesize-start", "data": {"voice": {"name": "alloy"}}})
        client.send({"type": "describe"})
        assert client.event()["type"] == "info"
    assert health(server)["requests_in_flight"] == 0
    served = httpx.post(f"{server.url}/v1/audio/speech", timeout=WAIT, json={
        "model": "tts-1", "input": "Hello.", "voice": "alloy", "response_format": "pcm"})
    assert served.status_code == 200 and len(served.content) > 0
    for client in idle:
        refused = client.event()
        assert refused["type"] == "error" and refused["data"]["code"] == "idle_timeout", refused
        assert "--wyoming-idle-seconds" in refused["data"]["text"]
        assert client.closed()
        client.close()
    assert any("wyoming: closing a connection: nothing came" in line for line in server.log_lines(start))
    still_serving(server)


def test_a_client_that_never_reads_is_let_go_by_the_write_timeout(server):
    """Long speech asked for and never read: once the socket's buffers are full the server's writes
    wait, and past --wyoming-write-seconds the connection is dropped and its slot and items freed."""
    start = len(server.log_lines())
    text = many_sentences(60)
    client = Raw(server.wyoming_port, receive_buffer=4096)
    client.send({"type": "synthesize", "data": {"text": text, "voice": {"name": "alloy"}}})

    def request_line():  # by its length: the previous test's request may log after `start`
        return [line for line in server.log_lines(start) if " speech request=" in line and "door=wyoming" in line
                and f" chars={len(text)} " in line]

    wait_for(request_line, "the request's log line")
    (line,) = request_line()  # its reason is quoted JSON, with spaces: read from the raw line
    fields = dict(re.findall(r"(\w+)=(\S+)", line))
    assert fields["status"] == "disconnected" and "(--wyoming-write-seconds)" in line, line
    assert float(fields["audio"].rstrip("s")) < 150, line  # 60 sentences: about 3 min, cut short
    wait_for(lambda: health(server)["requests_in_flight"] == 0 and health(server)["outstanding_items"] == 0,
             "the slot and items freed")
    client.close()
    still_serving(server)


def test_a_second_synthesize_start_is_refused_and_the_open_stream_goes_on(server):
    async def twice():
        async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="alloy")).event())
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="alloy")).event())
            refused = Error.from_event(await client.read_event())
            await client.write_event(SynthesizeChunk(text="The first stream still speaks.").event())
            await client.write_event(SynthesizeStop().event())
            types = []
            while not types or types[-1] != "synthesize-stopped":
                event = await client.read_event()
                assert event is not None, types
                types.append(event.type)
            return refused, types

    refused, types = asyncio.run(asyncio.wait_for(twice(), WAIT))
    assert refused.code == "stream_open" and "synthesize-stop" in refused.text
    assert types[0] == "audio-start" and types[-2:] == ["audio-stop", "synthesize-stopped"], types
    still_serving(server)


def accepted(port: int) -> Raw:
    """A connection the server has counted, shown by a describe answered. The server lets go of a
    client that has just closed a moment later; while it still counts one, a connection is refused at
    once, and another is tried (bounded: closed clients are let go within milliseconds)."""
    for _ in range(100):
        client = Raw(port)
        client.send({"type": "describe"})
        answer = client.event()
        if answer["type"] == "info":
            return client
        assert answer["data"]["code"] == "too_many_connections", answer
        client.closed()
        client.close()
    raise AssertionError("no connection was accepted in 100 tries")


def test_a_connection_past_the_cap_gets_an_error_and_is_closed(server):
    held = [accepted(server.wyoming_port) for _ in range(MAX_CONNECTIONS)]
    extra = Raw(server.wyoming_port)
    refused = extra.event()
    assert refused["type"] == "error" and refused["data"]["code"] == "too_many_connections", refused
    assert "--wyoming-max-connections" in refused["data"]["text"]
    assert extra.closed()
    extra.close()
    for client in held:  # idle ones are closed by the server in time, which frees the places they held
        refused = client.event()
        assert refused["data"]["code"] == "idle_timeout" and client.closed(), refused
        client.close()
    still_serving(server)


def test_a_unix_socket_path_that_exists_is_refused_in_one_line_and_left_alone(served_build, tmp_path):
    taken = tmp_path / "taken"
    taken.write_text("not the server's")
    result = run_script("serve.py", "--model_dir", served_build, "--voices_dir", tmp_path / "voices",
                        "--wyoming-uri", f"unix://{taken}")
    assert result.returncode != 0 and f"{taken} exists" in last_error_line(result), result.stderr
    assert taken.read_text() == "not the server's"


def test_the_unix_socket_the_door_made_is_removed_on_exit_and_only_it(tmp_path):
    path = tmp_path / "wyoming.sock"
    door = WyomingDoor(SimpleNamespace(config=SimpleNamespace(limits=Limits())), f"unix://{path}")

    async def serve_then_stop(replace: bool):
        async with door.running():
            assert path.is_socket()
            if replace:  # someone else's file where the socket was: the door leaves it
                path.unlink()
                path.write_text("someone else's")

    asyncio.run(serve_then_stop(replace=False))
    assert not path.exists()
    asyncio.run(serve_then_stop(replace=True))
    assert path.read_text() == "someone else's"


def test_the_zeroconf_announcement_is_withdrawn_on_exit(monkeypatch):
    import zeroconf.asyncio

    import codes.serve.doors.wyoming as door_module

    calls = []

    class Multicast:  # AsyncZeroconf's calls, recorded instead of sent
        async def async_register_service(self, service):
            calls.append(("register", service.name))

        async def async_unregister_service(self, service):
            calls.append(("unregister", service.name))

        async def async_close(self):
            calls.append(("close",))

    monkeypatch.setattr(zeroconf.asyncio, "AsyncZeroconf", Multicast)
    monkeypatch.setattr(door_module, "_lan_address", lambda: "127.0.0.1")
    door = WyomingDoor(SimpleNamespace(config=SimpleNamespace(limits=Limits())), f"tcp://127.0.0.1:{free_port()}",
                       zeroconf_name="omnivoice-test")

    async def serve():
        async with door.running():
            assert calls == [("register", "omnivoice-test._wyoming._tcp.local.")]

    asyncio.run(serve())
    assert calls[1:] == [("unregister", "omnivoice-test._wyoming._tcp.local."), ("close",)]
