"""serve.py's other doors on the one engine, each tried with its official client on loopback: Home
Assistant's Wyoming (the `wyoming` package's client), agents' MCP (the `mcp` SDK's client over
streamable HTTP and over stdio) and Open WebUI's calls (httpx), against one real server on the tiny build."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import sys
import threading
import time

import httpx
import numpy as np
import pytest
import soundfile
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from wyoming.audio import AudioChunk, AudioStart
from wyoming.client import AsyncTcpClient
from wyoming.error import Error
from wyoming.info import Describe, Info
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeVoice

from helpers.scripts import ROOT
from helpers.serving import RATE, Server, many_sentences, started

KEY = "door-key"
REPLY = ["Sure, I turned on the kitchen lights. ", "The living room stays dark, as you asked. ", "Anything else?"]
WAIT = 120  # seconds a test waits for an event before it fails


@pytest.fixture(scope="module")
def server(served_build, tmp_path_factory):
    yield from started(served_build, tmp_path_factory, "doors", "--api-key", KEY, "--num-steps", "8", wyoming=True,
                       mcp_output=True)


def http(srv: Server, method: str, path: str, **kwargs) -> httpx.Response:
    return httpx.request(method, f"{srv.url}{path}", headers={"Authorization": f"Bearer {KEY}"}, timeout=WAIT,
                         **kwargs)


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, WAIT))


async def read_until(client: AsyncTcpClient, last: str) -> list:
    """Events up to and with the first of type `last`."""
    events = []
    while True:
        event = await client.read_event()
        assert event is not None, f"connection closed before {last}; got {[e.type for e in events]}"
        events.append(event)
        if event.type == last:
            return events


def audio_of(events) -> np.ndarray:
    chunks = [AudioChunk.from_event(e) for e in events if AudioChunk.is_type(e.type)]
    assert all((c.rate, c.width, c.channels) == (RATE, 2, 1) for c in chunks)
    return np.frombuffer(b"".join(c.audio for c in chunks), dtype="<i2")


def wait_for_line(srv: Server, start: int, door: str, count: int = 1) -> list[dict]:
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline:
        lines = [line for line in srv.request_lines(start) if line["door"] == door]
        if len(lines) >= count:
            return lines
        time.sleep(0.1)
    raise AssertionError(f"no {door} request line in the log:\n" + "\n".join(srv.log_lines(start)))


# --- Wyoming (Home Assistant) -------------------------------------------------------------------

def test_wyoming_describe_lists_design_and_saved_voices_with_streaming(server):
    clip = http(server, "POST", "/v1/audio/speech", json={"model": "tts-1", "input": "A short clip to clone from.",
                                                         "voice": "coral", "response_format": "wav", "num_steps": 4,
                                                         "seed": 1}).content
    made = http(server, "POST", "/v1/audio/voices", data={"name": "kitchen", "text": "A short clip to clone from."},
                files={"file": ("clip.wav", clip, "audio/wav")})
    assert made.status_code == 200, made.text

    async def describe():
        async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
            await client.write_event(Describe().event())
            return Info.from_event(await client.read_event())

    info = run(describe())
    (program,) = info.tts
    assert program.supports_synthesize_streaming and program.installed and program.version
    names = [voice.name for voice in program.voices]
    assert {"alloy", "onyx", "kitchen"} <= set(names)
    languages = {voice.name: set(voice.languages) for voice in program.voices}
    assert {"en", "zh", "de", "sw"} <= languages["alloy"]  # every language the model knows, listed once
    assert all({"en", "zh", "de"} <= found for found in languages.values())  # every voice: Assist's languages


def test_wyoming_one_shot_gives_24khz_audio_then_stop(server):
    start = len(server.log_lines())

    async def once():
        async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
            await client.write_event(Synthesize(text="".join(REPLY), voice=SynthesizeVoice(name="alloy")).event())
            return await read_until(client, "audio-stop")

    events = run(once())
    begin = AudioStart.from_event(events[0])
    assert (begin.rate, begin.width, begin.channels) == (RATE, 2, 1)
    samples = audio_of(events)
    (line,) = wait_for_line(server, start, "wyoming")
    assert line["status"] == "ok" and abs(len(samples) / RATE - float(line["audio"].rstrip("s"))) < 0.01
    assert len(samples) > RATE and np.abs(samples).max() > 0


def test_wyoming_streaming_speaks_the_first_sentence_before_the_reply_is_written(server):
    """Home Assistant's sequence: start, chunks as the LLM writes, the whole text again as a plain
    synthesize (for older servers), stop. Audio for the first sentence comes before the last chunk
    is sent, and the plain synthesize is not spoken a second time. The voice is pinned on first use,
    so the first chunks arrive while it is being pinned."""
    start = len(server.log_lines())

    async def stream():
        async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="ballad")).event())
            for piece in ("Sure, I turned", " on the kitchen lights. "):
                await client.write_event(SynthesizeChunk(text=piece).event())
            early = await read_until(client, "audio-chunk")  # nothing more is sent until audio comes
            for piece in REPLY[1:]:
                await client.write_event(SynthesizeChunk(text=piece).event())
            await client.write_event(Synthesize(text="".join(REPLY), voice=SynthesizeVoice(name="ballad")).event())
            await client.write_event(SynthesizeStop().event())
            rest = await read_until(client, "synthesize-stopped")
            await client.write_event(Describe().event())  # a round trip: every event before it was handled
            await read_until(client, "info")
            return early, rest

    early, rest = run(stream())
    assert [e.type for e in early] == ["audio-start", "audio-chunk"]
    assert [e.type for e in rest if not AudioChunk.is_type(e.type)] == ["audio-stop", "synthesize-stopped"]
    (line,) = wait_for_line(server, start, "wyoming")
    assert line["status"] == "ok" and int(line["sentences"]) >= 3 and int(line["chars"]) == len("".join(REPLY))
    assert any("pinned voice design 'british accent, male, middle-aged" in l for l in server.log_lines(start))
    assert len([l for l in server.request_lines(start) if l["door"] == "wyoming"]) == 1  # the copy was not spoken


def test_wyoming_refusals_are_error_events_and_the_connection_keeps_serving(server):
    async def refused():
        async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
            await client.write_event(Synthesize(text="Hello.", voice=SynthesizeVoice(name="nobody")).event())
            unknown = Error.from_event(await client.read_event())
            await client.write_event(Synthesize(text="   ").event())
            empty = Error.from_event(await client.read_event())
            await client.write_event(SynthesizeStart().event())
            await client.write_event(SynthesizeStop().event())
            nothing = await read_until(client, "synthesize-stopped")
            await client.write_event(Synthesize(text="Still here.", voice=SynthesizeVoice(language="en")).event())
            return unknown, empty, nothing, await read_until(client, "audio-stop")

    unknown, empty, nothing, after = run(refused())
    assert "unknown voice 'nobody'" in unknown.text and "alloy" in unknown.text
    assert "empty" in empty.text
    assert [e.type for e in nothing] == ["error", "synthesize-stopped"] and "empty" in nothing[0].data["text"]
    assert len(audio_of(after)) > 0


def test_a_wyoming_stream_gives_its_slot_back_while_it_waits_for_text(server):
    """A stream's first sentence is spoken, then it waits for more: meanwhile it holds no slot
    (requests_in_flight drops to 0), and the next sentence takes one again and is spoken."""
    start = len(server.log_lines())

    def in_flight() -> int:
        return http(server, "GET", "/health").json()["requests_in_flight"]

    async def stream():
        async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
            await client.write_event(SynthesizeStart(voice=SynthesizeVoice(name="alloy")).event())
            await client.write_event(SynthesizeChunk(text="Hello there, how are you? ").event())
            first = await read_until(client, "audio-chunk")
            deadline = time.monotonic() + WAIT
            while await asyncio.to_thread(in_flight) and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            waiting = await asyncio.to_thread(in_flight)
            await client.write_event(SynthesizeChunk(text="Goodbye for now.").event())
            await client.write_event(SynthesizeStop().event())
            return first, waiting, await read_until(client, "synthesize-stopped")

    first, waiting, rest = run(stream())
    assert waiting == 0
    assert [e.type for e in first][0] == "audio-start" and "audio-stop" in [e.type for e in rest]
    (line,) = wait_for_line(server, start, "wyoming")
    assert line["status"] == "ok" and int(line["sentences"]) >= 2, line  # the first sentence may come as clauses


def test_wyoming_client_that_leaves_mid_stream_frees_its_items(server):
    start = len(server.log_lines())
    # long enough (about 20 chunks) that the server cannot have made it all before it sees the client go
    text = many_sentences(60)

    async def leave():
        client = AsyncTcpClient("127.0.0.1", server.wyoming_port)
        await client.connect()
        await client.write_event(Synthesize(text=text).event())
        await read_until(client, "audio-start")
        await client.disconnect()

    run(leave())
    (line,) = wait_for_line(server, start, "wyoming")
    assert line["status"] == "disconnected", (line["status"], line.get("reason"))
    assert int(line["sentences"]) > 10 and float(line["audio"].rstrip("s")) < 60, line  # 60 sentences: about 3 min
    deadline = time.monotonic() + 30
    while http(server, "GET", "/health").json()["outstanding_items"] and time.monotonic() < deadline:
        time.sleep(0.1)
    assert http(server, "GET", "/health").json()["outstanding_items"] == 0


def test_wyoming_and_http_requests_sent_together_share_decoding_steps(server):
    """The Wyoming request starts while the HTTP one still has chunks to make: past the Wyoming
    request's first chunk (which goes first) their later chunks are made in the same steps."""
    start = len(server.log_lines())
    text = many_sentences(24)
    first_audio, got = threading.Event(), {}

    def over_http():
        body = {"model": "omnivoice", "input": text, "voice": "alloy", "response_format": "pcm"}
        with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=WAIT,
                          headers={"Authorization": f"Bearer {KEY}"}) as response:
            got["status"] = response.status_code
            for chunk in response.iter_raw():
                if chunk:
                    first_audio.set()

    async def over_wyoming():
        async with AsyncTcpClient("127.0.0.1", server.wyoming_port) as client:
            await client.write_event(Synthesize(text=text, voice=SynthesizeVoice(name="alloy")).event())
            return await read_until(client, "audio-stop")

    thread = threading.Thread(target=over_http)
    thread.start()
    assert first_audio.wait(WAIT)
    run(over_wyoming())
    thread.join(WAIT)
    assert got["status"] == 200
    lines = {line["door"]: line for line in wait_for_line(server, start, "wyoming") + wait_for_line(server, start, "http")}
    assert int(lines["wyoming"]["max_batch_shared"]) >= 2 and int(lines["http"]["max_batch_shared"]) >= 2, lines


# --- MCP (agents) -------------------------------------------------------------------------------

def mcp_http(srv: Server) -> Client:
    transport = streamable_http_client(f"{srv.url}/mcp",
                                       http_client=create_mcp_http_client(headers={"Authorization": f"Bearer {KEY}"}))
    return Client(transport)


async def tool_calls(client: Client, folder) -> dict:
    async with client:
        tools = {tool.name for tool in (await client.list_tools()).tools}
        spoken = await client.call_tool("speak", {"text": "Hello from agent 7.", "num_steps": 4, "seed": 3,
                                                  "normalize_text": True, "denoise": False})
        bad = await client.call_tool("speak", {"text": "Hello.", "speed": 99})
        unknown = await client.call_tool("speak", {"text": "Hello.", "voice": "nobody"})
        voices = await client.call_tool("list_voices", {})
        outside = await client.call_tool("save_voice", {"audio_path": "/etc/hostname", "transcript": "x",
                                                        "name": "stolen"})
        again = await client.call_tool("speak", {"text": "Still serving.", "num_steps": 4, "response_format": "mp3"})
        return {"tools": tools, "spoken": spoken, "bad": bad, "unknown": unknown, "voices": voices,
                "outside": outside, "again": again}


def check_tool_calls(calls: dict) -> np.ndarray:
    assert calls["tools"] == {"speak", "speak_script", "list_voices", "save_voice"}
    spoken = calls["spoken"]
    assert not spoken.is_error
    audio = spoken.content[0]
    assert audio.type == "audio" and audio.mime_type == "audio/wav"
    wav, rate = soundfile.read(io.BytesIO(base64.b64decode(audio.data)), dtype="int16")
    assert rate == RATE and len(wav) > 0
    for name in ("bad", "unknown", "outside"):
        assert calls[name].is_error, name
    assert "speed must be between" in calls["bad"].content[0].text
    assert "unknown voice 'nobody'" in calls["unknown"].content[0].text
    assert "is not a file under" in calls["outside"].content[0].text
    assert "alloy" in calls["voices"].content[0].text
    assert not calls["again"].is_error and calls["again"].content[0].mime_type == "audio/mpeg"
    return wav


def test_mcp_over_http_needs_the_key_and_speaks_into_the_output_folder(server):
    refused = httpx.post(f"{server.url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, timeout=WAIT)
    assert refused.status_code == 401 and refused.json()["error"]["code"] == "invalid_api_key"
    start = len(server.log_lines())
    wav = check_tool_calls(run(tool_calls(mcp_http(server), server.out)))
    written = sorted(server.out.glob("speech-*.wav"))
    assert len(written) == 1
    np.testing.assert_array_equal(soundfile.read(written[0], dtype="int16")[0], wav)
    assert not list(server.out.glob(".speech-*"))  # no temporary left behind
    lines = server.request_lines(start)
    assert {line["door"] for line in lines} == {"mcp"}
    assert json.loads(lines[0]["options"]) == {"num_steps": 4, "denoise": False, "normalize_text": True}
    assert server.proc.poll() is None


def test_mcp_save_voice_reads_clips_only_from_its_folders_and_speaks_with_them(server):
    clip = server.out / "reference.wav"
    soundfile.write(clip, soundfile.read(io.BytesIO(http(server, "POST", "/v1/audio/speech", json={
        "model": "omnivoice", "input": "A clip for the agent.", "voice": "ash", "response_format": "wav",
        "num_steps": 4, "seed": 2}).content))[0], RATE)

    async def save():
        async with mcp_http(server) as client:
            saved = await client.call_tool("save_voice", {"audio_path": str(clip), "transcript": "A clip for the agent.",
                                                          "name": "Agent Voice"})
            taken = await client.call_tool("save_voice", {"audio_path": str(clip), "transcript": "x",
                                                          "name": "agent-voice"})
            unheard = await client.call_tool("save_voice", {"audio_path": str(clip), "name": "unheard"})
            spoken = await client.call_tool("speak", {"text": "Cloned.", "voice": "agent-voice", "num_steps": 4})
            return saved, taken, unheard, spoken

    saved, taken, unheard, spoken = run(save())
    assert not saved.is_error and "agent-voice" in saved.content[0].text
    assert (server.voices_dir / "agent-voice.npz").is_file()
    assert taken.is_error and "exists" in taken.content[0].text
    assert unheard.is_error and "--include-asr" in unheard.content[0].text  # this build has no recogniser
    assert not (server.voices_dir / "unheard.npz").exists()
    assert not spoken.is_error and spoken.content[0].type == "audio"


def test_mcp_over_stdio_serves_the_same_tools(served_build, tmp_path):
    params = StdioServerParameters(command=sys.executable, cwd=str(ROOT),
                                   args=[str(ROOT / "serve.py"), "--model_dir", str(served_build), "--voices_dir",
                                         str(tmp_path / "voices"), "--mcp-stdio"])
    check_tool_calls(run(tool_calls(Client(params), None)))


# --- Open WebUI ---------------------------------------------------------------------------------

def test_open_webui_lists_models_and_voices_then_speaks_with_tts_1(server):
    models = http(server, "GET", "/v1/audio/models")
    assert models.status_code == 200 and {"tts-1", "tts-1-hd"} <= {m["id"] for m in models.json()["models"]}
    voices = http(server, "GET", "/v1/audio/voices").json()["voices"]
    assert voices and all(isinstance(v["id"], str) and isinstance(v["name"], str) for v in voices)
    for model in ("tts-1", "tts-1-hd"):  # what Open WebUI sends: model, input, voice (mp3 by default)
        spoken = http(server, "POST", "/v1/audio/speech", json={"model": model, "input": "Hello from the chat.",
                                                                "voice": voices[0]["id"]})
        assert spoken.status_code == 200 and spoken.headers["content-type"] == "audio/mpeg" and spoken.content
    assert httpx.get(f"{server.url}/v1/audio/models").status_code == 401  # the key guards it like every /v1 route


def test_num_steps_sets_what_a_request_leaves_out(server):
    body = {"model": "tts-1", "input": "Hello.", "voice": "alloy", "response_format": "pcm", "seed": 4}
    left_out = http(server, "POST", "/v1/audio/speech", json=body).content
    assert left_out == http(server, "POST", "/v1/audio/speech", json={**body, "num_steps": 8}).content
    assert left_out != http(server, "POST", "/v1/audio/speech", json={**body, "num_steps": 32}).content
