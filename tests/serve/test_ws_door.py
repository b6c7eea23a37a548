"""The voice agents' door, /v1/audio/speech/stream, with the `websockets` client against a real serve.py on
loopback (tiny build): text in pieces speaks what the whole text does, flush, barge-in that frees the slot,
timings measured from the audio sent, the key and web-page rules of /v1, and bad messages that end only their
own connection; and the same timings on the other doors (SSE, MCP, Wyoming's timestamps)."""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time

import httpx
import numpy as np
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import connect
from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.client import AsyncTcpClient
from wyoming.tts import Synthesize, SynthesizeVoice

from codes.serve.doors.stream import STREAM_PATH
from helpers.faults import fault_hook
from helpers.serving import RATE, Server, started

KEY = "agent-key"
REPLY = "Sure, I turned on the kitchen lights. The living room stays dark, as you asked. Anything else?"
START = {"type": "start", "voice": "alloy", "num_steps": 4, "seed": 11}
WAIT = 120  # seconds a test waits for a message before it fails
IDLE = 5  # --ws-idle-seconds of this module's server


@pytest.fixture(scope="module")
def server(served_build, tmp_path_factory):
    for srv in started(served_build, tmp_path_factory, "ws", "--api-key", KEY, "--num-steps", "4",
                       "--ws-idle-seconds", str(IDLE), wyoming=True):
        yield with_stream_door(srv)


def with_stream_door(srv: Server) -> Server:
    srv.ws_url = srv.url.replace("http://", "ws://") + STREAM_PATH
    return srv


def own_server(served_build, tmp_path, *flags: str, env: dict | None = None) -> Server:
    """A server of the test's own (other bounds, a fault hook)."""
    return with_stream_door(Server(served_build, tmp_path / "voices", tmp_path / "server.log", *flags, env=env))


def opened(srv: Server, **kwargs):
    return connect(srv.ws_url, additional_headers={"Authorization": f"Bearer {KEY}"}, open_timeout=WAIT, **kwargs)


def send(ws, **message) -> None:
    ws.send(json.dumps(message))


def until(ws, last: str) -> tuple[bytes, list[dict]]:
    """The audio and the JSON messages up to and with the first of type `last`."""
    audio, events = bytearray(), []
    while True:
        message = ws.recv(timeout=WAIT)
        if isinstance(message, bytes):
            audio += message
            continue
        events.append(json.loads(message))
        if events[-1]["type"] in (last, "error"):
            assert events[-1]["type"] == last, events[-1]
            return bytes(audio), events


def spoken(srv: Server, pieces: list[str], start: dict = START) -> tuple[bytes, list[dict]]:
    with opened(srv) as ws:
        ws.send(json.dumps(start))
        for piece in pieces:
            send(ws, type="text", text=piece)
        send(ws, type="end")
        audio, events = until(ws, "done")
        with pytest.raises(ConnectionClosed):  # the server closes after done
            ws.recv(timeout=WAIT)
        assert ws.close_code == 1000
    return audio, events


def timings(events: list[dict]) -> list[dict]:
    return [event for event in events if event["type"] == "timing"]


def check_timings(found: list[dict], audio_samples: int, text: str) -> None:
    """Increasing, back to back, within the audio sent, ending where it ends; their texts join into the input."""
    assert found
    starts = [t["start"] for t in found]
    assert starts[0] == 0 and all(a < b for a, b in zip(starts, starts[1:]))
    assert all(t["end"] > t["start"] for t in found)
    assert all(a["end"] == b["start"] for a, b in zip(found, found[1:]))  # measured from the samples themselves
    assert found[-1]["end"] == audio_samples / RATE
    assert " ".join(t["text"] for t in found) == " ".join(text.split())


def health(srv: Server) -> dict:
    return httpx.get(f"{srv.url}/health", timeout=WAIT).json()


def wait_until_idle(srv: Server) -> dict:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        state = health(srv)
        if state["requests_in_flight"] == 0 and state["outstanding_items"] == 0:
            return state
        time.sleep(0.02)
    raise AssertionError(f"the server stayed busy: {health(srv)}")


# --- the door ------------------------------------------------------------------------------------

def test_text_three_characters_at_a_time_speaks_what_the_whole_text_does(server):
    start = len(server.log_lines())
    whole_audio, whole_events = spoken(server, [REPLY])
    piece_audio, piece_events = spoken(server, [REPLY[i:i + 3] for i in range(0, len(REPLY), 3)])
    assert len(whole_audio) > RATE  # more than half a second of 16-bit samples
    assert piece_audio == whole_audio  # the same chunks, the same seeds: the same codes and samples
    assert timings(piece_events) == timings(whole_events)
    check_timings(timings(piece_events), len(piece_audio) // 2, REPLY)
    assert [t["text"] for t in timings(piece_events)][0] == "Sure,"  # the first clause goes first
    lines = [line for line in server.request_lines(start) if line["door"] == "ws"]
    assert len(lines) == 2 and {line["status"] for line in lines} == {"ok"}


def test_word_timings_asked_of_a_build_without_a_recogniser_keep_chunk_timings(server):
    defaults = httpx.get(f"{server.url}/v1/audio/defaults", headers={"Authorization": f"Bearer {KEY}"},
                         timeout=WAIT).json()
    assert defaults["word_timings"] is False  # tests/serve/test_word_timings.py has a build that aligns
    audio, events = spoken(server, ["Turn on the lights."], {**START, "word_timings": True})
    found = timings(events)
    check_timings(found, len(audio) // 2, "Turn on the lights.")
    assert all("words" not in timing for timing in found)


def test_flush_speaks_what_is_pending_without_a_sentence_end(server):
    with opened(server) as ws:
        ws.send(json.dumps(START))
        send(ws, type="text", text="Turn on the lights in the hall")
        send(ws, type="flush")
        audio, events = until(ws, "timing")  # spoken before any end
        assert audio and events[-1]["text"] == "Turn on the lights in the hall"
        send(ws, type="text", text=" and the porch")
        send(ws, type="end")
        rest, events = until(ws, "done")
        assert timings(events)[0]["text"] == "and the porch" and timings(events)[0]["start"] == len(audio) / 2 / RATE


def test_cancel_mid_sentence_frees_the_slot_and_new_text_speaks(server):
    start = len(server.log_lines())
    long_text = " ".join(f"This is sentence number {i}, and it goes on for a while." for i in range(30))
    with opened(server) as ws:
        ws.send(json.dumps({**START, "num_steps": 128}))  # each later chunk long in the engine: the cancel lands mid-way
        send(ws, type="text", text=long_text)
        assert isinstance(ws.recv(timeout=WAIT), bytes)  # its audio has begun
        send(ws, type="cancel")
        _, events = until(ws, "cancelled")
        heard = " ".join(t["text"] for t in timings(events))
        assert len(heard) < len(long_text) / 2 and long_text.startswith(heard)  # cut short
        # freed before `cancelled` was sent: the admission slot at once, the engine's items by the step's end
        assert health(server)["requests_in_flight"] == 0
        wait_until_idle(server)
        send(ws, type="text", text="Goodbye.")
        send(ws, type="end")
        after, events = until(ws, "done")
    # what came after `cancelled` is the new text's audio and nothing else
    check_timings(timings(events), len(after) // 2, "Goodbye.")
    lines = [line for line in server.request_lines(start) if line["door"] == "ws"]
    assert [line["status"] for line in lines] == ["cancelled", "ok"]


def test_a_cancel_opens_no_utterance_until_text_comes(server):
    """Issue 42: a cancel followed by the client leaving logged a `disconnected chars=0` request for speech
    that never was; the next utterance opens on its first text. Request ids count every utterance opened, so
    the next connection's id tells whether one was opened in between."""
    start = len(server.log_lines())
    with opened(server) as ws:
        ws.send(json.dumps({**START, "num_steps": 64}))
        send(ws, type="text", text=" ".join(f"Sentence {i} is here to be cut short." for i in range(8)))
        assert isinstance(ws.recv(timeout=WAIT), bytes)
        send(ws, type="cancel")
        until(ws, "cancelled")
    with opened(server) as ws:  # cancel, then end at once: done, with nothing spoken and nothing logged
        ws.send(json.dumps(START))
        send(ws, type="cancel")
        until(ws, "cancelled")
        send(ws, type="end")
        audio, _ = until(ws, "done")
        assert audio == b""
    spoken(server, ["Goodbye."])
    lines = [line for line in server.request_lines(start) if line["door"] == "ws"]
    assert [line["status"] for line in lines] == ["cancelled", "cancelled", "ok"], lines
    ids = [int(line["request"]) for line in lines]
    assert ids == list(range(ids[0], ids[0] + 3))  # no utterance was opened after either cancel


def test_a_cancel_sent_with_the_close_while_audio_goes_out_is_the_clients_cancel(served_build, tmp_path):
    """A barge-in as LiveKit's plugin sends it: cancel, then close at once. Both can reach the server while
    its sender is about to write audio, and that write fails on the closing socket before the reader has
    read the cancel. The request is the client's cancel (once logged as a server error). Here each piece's
    encoding holds the server's loop a second (a fault hook), and the two are sent while it is held."""
    marker = tmp_path / "hook" / "encoding"
    env = fault_hook(tmp_path / "hook", "codes.serve.core.encode", None, "pcm16", "delay", marker, after=1)
    srv = own_server(served_build, tmp_path, "--api-key", KEY, "--num-steps", "4", env=env)
    try:
        start = len(srv.log_lines())
        with opened(srv) as ws:
            send(ws, **START)
            send(ws, type="text", text=" ".join(f"Sentence {i} is here to be cut short." for i in range(30)))
            assert isinstance(ws.recv(timeout=WAIT), bytes)  # its audio has begun
            marker.unlink()
            deadline = time.monotonic() + WAIT
            while not marker.exists():  # a later piece is being encoded: the server's loop is held
                assert time.monotonic() < deadline, "no later piece was encoded"
                time.sleep(0.01)
            send(ws, type="cancel")
        lines = srv.door_lines("ws", start, wait=WAIT, missing="no stream request line in the log")
        assert [line["status"] for line in lines] == ["cancelled"], srv.log_lines(start)
        wait_until_idle(srv)
    finally:
        srv.stop()


def test_the_key_rides_in_a_subprotocol_for_browsers_and_web_pages_are_held_to_origin(server):
    encoded = base64.urlsafe_b64encode(KEY.encode()).decode().rstrip("=")
    with connect(server.ws_url, subprotocols=["omnivoice", f"omnivoice.key.{encoded}"], open_timeout=WAIT) as ws:
        assert ws.subprotocol == "omnivoice"
        ws.send(json.dumps(START))
        send(ws, type="text", text="Hello.")
        send(ws, type="end")
        assert until(ws, "done")[0]
    for headers, subprotocols, status in (({}, None, 401), ({"Authorization": "Bearer wrong"}, None, 401),
                                          ({}, ["omnivoice", "omnivoice.key.d3Jvbmc"], 401),
                                          ({"Authorization": f"Bearer {KEY}", "Origin": "http://evil.example"},
                                           None, 403)):
        with pytest.raises(InvalidStatus) as refused:
            connect(server.ws_url, additional_headers=headers, subprotocols=subprotocols, open_timeout=WAIT)
        assert refused.value.response.status_code == status
        assert json.loads(refused.value.response.body)["error"]["code"] in ("invalid_api_key", "origin_not_allowed")


# --- bad messages end only their own connection ----------------------------------------------------

def refusal(ws) -> tuple[dict, int]:
    """The error a connection ends with, and its close code."""
    while True:
        message = ws.recv(timeout=WAIT)
        if isinstance(message, str) and json.loads(message)["type"] == "error":
            error = json.loads(message)["error"]
            break
    with pytest.raises(ConnectionClosed):
        ws.recv(timeout=WAIT)
    return error, ws.close_code


@pytest.mark.parametrize("first, code", [
    ("hello", "not_json"),
    (json.dumps({"type": "shout"}), "unknown_type"),
    (json.dumps({"type": "text", "text": "Hello."}), "not_started"),
    (json.dumps({"type": "start", "voice": "alloy", "response_format": "mp3"}), "unsupported_format"),
    (json.dumps({"type": "start", "voice": "alloy", "input": "Hello."}), "not_streamed"),
    (json.dumps({"type": "start", "voice": "alloy", "speed": 99}), None),
])
def test_a_bad_message_gets_one_clear_error_and_the_connection_closes(server, first, code):
    with opened(server) as ws:
        ws.send(first)
        error, close = refusal(ws)
    assert error["code"] == code and error["message"] and error["type"] == "invalid_request_error"
    assert close == 1008


def test_an_unknown_voice_is_the_apis_404_envelope(server):
    with opened(server) as ws:
        ws.send(json.dumps({**START, "voice": "nobody"}))
        error, close = refusal(ws)
    assert error["code"] == "voice_not_found" and close == 1008


def test_floods_are_bounded_while_others_are_served(server):
    """A 10 MB frame, 100k tiny frames and 100k one-character texts each end their own connection; a
    speech request from another client is answered meanwhile."""
    served = {}

    def other():
        body = {"model": "omnivoice", "input": "Still here.", "voice": "alloy", "response_format": "pcm"}
        served["status"] = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=WAIT,
                                      headers={"Authorization": f"Bearer {KEY}"}).status_code

    with opened(server, max_size=None) as ws:
        try:
            ws.send("x" * (10 << 20))
        except ConnectionClosed:
            pass  # closed while it was being sent
        with pytest.raises(ConnectionClosed):
            ws.recv(timeout=WAIT)
        assert ws.close_code == 1009  # uvicorn's frame cap is --ws-max-message-bytes: never held whole
    codes = []
    for message in (json.dumps({"type": "flush"}), json.dumps({"type": "text", "text": "a"})):
        with opened(server) as ws:
            ws.send(json.dumps(START))
            thread = threading.Thread(target=other)
            thread.start()
            try:
                for _ in range(100_000):
                    ws.send(message)
            except ConnectionClosed:
                pass  # refused before the last one
            error, close = refusal(ws)
            thread.join(WAIT)
            codes.append(error["code"])
            assert close == 1008 and served.pop("status") == 200
    assert codes == ["too_many_messages", "input_too_long"]
    wait_until_idle(server)


def test_a_client_that_starts_and_goes_silent_is_closed(server):
    with opened(server) as ws:
        ws.send(json.dumps(START))
        error, close = refusal(ws)
    assert error["code"] == "idle_timeout" and "--ws-idle-seconds" in error["message"] and close == 1008


def test_a_stream_whose_voice_is_still_being_made_is_not_closed_as_idle(served_build, tmp_path):
    """A first request for a design voice waits for its pin, which at full size takes tens of seconds; its text
    and end are sent. The server owes it audio, so --ws-idle-seconds must not close it. Here the pin's save is
    held three times the idle bound (a fault hook in the server process)."""
    marker = tmp_path / "hook" / "delayed"
    env = fault_hook(tmp_path / "hook", "codes.runtime.synthesis", "Voice", "save", "delay", marker, after=3)
    srv = own_server(served_build, tmp_path, "--api-key", KEY, "--num-steps", "4", "--ws-idle-seconds", "1", env=env)
    try:
        with opened(srv) as ws:
            send(ws, **START)
            send(ws, type="text", text=REPLY)
            send(ws, type="end")
            audio, events = until(ws, "done")
        assert marker.exists() and len(audio) > 0
        assert [e for e in events if e["type"] == "error"] == []
    finally:
        srv.stop()


# --- the same timings on the other doors --------------------------------------------------------------

def test_the_sse_stream_carries_a_timing_event_after_each_pieces_audio(server):
    body = {"model": "omnivoice", "input": REPLY, "voice": "alloy", "response_format": "pcm", "stream_format": "sse",
            "num_steps": 4, "seed": 11}
    events = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=WAIT,
                      headers={"Authorization": f"Bearer {KEY}"}) as response:
        for line in response.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
    kinds = [event["type"] for event in events]
    assert kinds[-1] == "speech.audio.done" and kinds.count("speech.audio.timing") >= 2
    heard, samples = [], 0
    for event in events:  # each timing ends where the audio sent so far ends
        if event["type"] == "speech.audio.delta":
            samples += len(base64.b64decode(event["audio"])) // 2
        elif event["type"] == "speech.audio.timing":
            assert event["end"] == samples / RATE
            heard.append(event)
    check_timings(heard, samples, REPLY)


def test_mcp_speak_returns_timings_when_asked(server):
    async def speak():
        transport = streamable_http_client(f"{server.url}/mcp", http_client=create_mcp_http_client(
            headers={"Authorization": f"Bearer {KEY}"}))
        async with Client(transport) as client:
            return await client.call_tool("speak", {"text": REPLY, "num_steps": 4, "seed": 11,
                                                    "response_format": "pcm", "timings": True})

    result = asyncio.run(asyncio.wait_for(speak(), WAIT))
    assert not result.is_error
    audio = base64.b64decode(result.content[0].data)
    found = json.loads(result.content[-1].text)["timings"]
    check_timings(found, len(audio) // 2, REPLY)


def test_wyoming_audio_events_carry_their_timestamps(server):
    async def once():
        async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
            await client.write_event(Synthesize(text=REPLY, voice=SynthesizeVoice(name="alloy")).event())
            events = []
            while not events or not AudioStop.is_type(events[-1].type):
                events.append(await client.read_event())
            return events

    events = asyncio.run(asyncio.wait_for(once(), WAIT))
    assert AudioStart.from_event(events[0]).timestamp == 0
    chunks = [AudioChunk.from_event(e) for e in events if AudioChunk.is_type(e.type)]
    samples = 0
    for chunk in chunks:  # each chunk starts where the audio before it ends
        assert chunk.timestamp == samples * 1000 // RATE
        samples += len(chunk.audio) // 2
    assert AudioStop.from_event(events[-1]).timestamp == samples * 1000 // RATE
    assert np.frombuffer(b"".join(c.audio for c in chunks), "<i2").any()


def test_a_client_that_reads_no_audio_is_let_go_and_frees_its_slot(served_build, tmp_path):
    """--ws-write-seconds: a client that stops reading holds the server's write past the bound and is closed."""
    srv = own_server(served_build, tmp_path, "--num-steps", "2", "--ws-write-seconds", "2")
    try:
        text = " ".join(f"Sentence number {i} is here to fill the socket with a lot of audio." for i in range(55))
        with connect(srv.ws_url, open_timeout=WAIT, max_queue=1) as ws:  # reads one message, then nothing more
            ws.send(json.dumps({"type": "start", "voice": "alloy"}))
            send(ws, type="text", text=text)
            send(ws, type="end")
            srv.door_lines("ws", wait=WAIT, missing="the stalled client was never let go")
        (line,) = [line for line in srv.log_lines() if "door=ws" in line]
        assert "status=disconnected" in line and "--ws-write-seconds" in line
        assert wait_until_idle(srv)["requests_in_flight"] == 0
    finally:
        srv.stop()
