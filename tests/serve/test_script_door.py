"""The server's script door, end to end: POST /v1/audio/script through the official openai client (its
generic post) and httpx (SSE), MCP's speak_script through the mcp SDK's client; the same track as the
runtime's own script path for the same voices and seed; the bounds, checked before any work; a client that
leaves frees what it held."""

from __future__ import annotations

import asyncio
import base64
import io
import json
import time

import httpx
import numpy as np
import openai
import pytest
import soundfile
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from helpers.serving import RATE, Server, started

KEY = "script-key"
WAIT = 300  # seconds a test waits for an answer before it fails
SETTINGS = {"num_steps": 4, "position_temperature": 0.0, "seed": 5}  # deterministic: equal to the runtime's run
DIALOGUE = ('Alice: Hello there. <break time="400ms"/> How are you today?\n'
            "Bob: Fine, thanks. And you?\n"
            "Alice: Very well.")
SEEDED = {"num_steps": 4, "seed": 5}  # MCP's tool takes no position_temperature: seeded noise is the same noise
SPEAKERS = {"Alice": "nova", "Bob": "instruct:male, low pitch"}
SRT = ("\ufeff1\r\n00:00:00,500 --> 00:00:02,000\r\n<i>Alice: First cue.</i>\r\n\r\n"
       "2\r\n00:00:02,500 --> 00:00:04,250\r\nBob: The second one.\r\n\r\n"
       "00:00:05,000 --> 00:00:06,000\r\n{\\an8}Last.\r\n")


@pytest.fixture(scope="module")
def server(served_build, tmp_path_factory):
    yield from started(served_build, tmp_path_factory, "script", "--api-key", KEY, "--num-steps", "4", mcp_output=True)


@pytest.fixture(scope="module")
def bounded(served_build, tmp_path_factory):
    folder = tmp_path_factory.mktemp("bounded")
    srv = Server(served_build, folder / "voices", folder / "server.log", "--max-script-segments", "3",
                 "--max-script-chars", "120", "--max-script-seconds", "20", "--max-script-bytes", "2000",
                 "--max-scripts", "1", "--num-steps", "4")
    yield srv
    srv.stop()


def headers() -> dict:
    return {"Authorization": f"Bearer {KEY}"}


def post(srv: Server, body: dict, **kwargs) -> httpx.Response:
    return httpx.post(f"{srv.url}/v1/audio/script", json=body, headers=headers(), timeout=WAIT, **kwargs)


def samples(data: bytes) -> np.ndarray:
    wav, rate = soundfile.read(io.BytesIO(data), dtype="int16")
    assert rate == RATE
    return wav


def sse_events(srv: Server, body: dict, key: str | None = KEY) -> list[dict]:
    with httpx.stream("POST", f"{srv.url}/v1/audio/script", json={**body, "stream_format": "sse"},
                      headers={"Authorization": f"Bearer {key}"} if key else None, timeout=WAIT) as response:
        assert response.status_code == 200, response.read()
        return [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]


def runtime_track(build, script: str, speakers: dict, script_format: str = "text", **options) -> np.ndarray:
    """The runtime's own script path (codes/runtime/script) on the same build, as int16 samples."""
    from codes.runtime.script import speak_script
    from codes.runtime.synthesis import OmniVoiceOnnx
    from codes.serve.core.encode import pcm16

    tts = OmniVoiceOnnx(build, threads=1)
    settings = {k: v for k, v in SETTINGS.items() if k != "seed"}
    rendered = speak_script(tts, text=script, speakers=speakers, script_format=script_format, seed=SETTINGS["seed"],
                            **options, **settings)
    return np.frombuffer(pcm16(rendered.audio, RATE), np.int16)


def test_a_dialogue_through_the_openai_client_is_the_runtimes_track(server, served_build, tmp_path):
    client = server.client(KEY)
    done = client.post("/audio/script", cast_to=object,
                       body={"script": DIALOGUE, "speakers": SPEAKERS, "gap": 0.25, **SETTINGS})
    assert done["type"] == "script.done" and done["response_format"] == "wav"
    track = samples(base64.b64decode(done["audio"]))
    assert len(track) == round(done["duration"] * RATE)
    assert [(s["speaker"], s["text"]) for s in done["segments"]] == [
        ("Alice", "Hello there."), ("Alice", "How are you today?"), ("Bob", "Fine, thanks. And you?"),
        ("Alice", "Very well.")]
    starts = [s["start"] for s in done["segments"]]
    assert starts == sorted(starts) and all(s["end"] > s["start"] for s in done["segments"])
    # the same voices on the runtime's own path: nova's pin, exported, and the same design
    pin = tmp_path / "nova.npz"
    exported = httpx.get(f"{server.url}/v1/audio/voices/nova?format=npz", headers=headers(), timeout=WAIT)
    pin.write_bytes(exported.content)
    expected = runtime_track(served_build, DIALOGUE, {"Alice": str(pin), "Bob": SPEAKERS["Bob"]}, gap=0.25)
    np.testing.assert_array_equal(track, expected)
    # captions parse back to the segments' times
    from codes.runtime.script import parse_script

    cues = parse_script(done["captions"], "srt").segments
    assert [round(c.start, 3) for c in cues] == [round(s["start"], 3) for s in done["segments"]]
    with pytest.raises(openai.NotFoundError) as refused:  # an unknown voice is the API's 404
        client.post("/audio/script", cast_to=object, body={"script": "Hi.", "speakers": {"A": "nobody"}})
    assert refused.value.body["param"] == "speakers"


def test_an_srt_streams_progress_and_its_audio_in_timeline_order(server, served_build):
    body = {"script": SRT, "format": "srt", "speakers": {"Alice": "alloy", "Bob": "ash"}, "response_format": "pcm",
            "captions": "vtt", **SETTINGS}
    events = sse_events(server, body)
    kinds = [event["type"] for event in events]
    assert kinds[0] == "script.started" and kinds[-1] == "script.done" and "error" not in kinds
    assert events[0]["segments"] == 3 and events[0]["speakers"] == ["Alice", "Bob"]
    progress = [event for event in events if event["type"] == "script.progress"]
    assert [p["done"] for p in progress] == [1, 2, 3] and {p["total"] for p in progress} == {3}
    pcm = b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "script.audio.delta")
    done = events[-1]
    assert "audio" not in done and done["captions"].startswith("WEBVTT")
    streamed = np.frombuffer(pcm, np.int16)
    assert len(streamed) >= 6 * RATE  # at least until the last cue's end
    for segment, cue_start in zip(done["segments"], (0.5, 2.5, 5.0)):
        assert segment["start"] == cue_start  # each cue's speech starts exactly at its time
    whole = post(server, {**body, "response_format": "wav"}).json()  # one answer: the same track
    np.testing.assert_array_equal(samples(base64.b64decode(whole["audio"])), streamed)


def test_an_edited_resubmission_speaks_only_the_changed_segment(server, served_build, tmp_path):
    """The server keeps a script's finished segments (--script-cache-bytes/-seconds): the same script again, with
    one line edited, speaks that line alone, and its track is the edited script's, as if spoken afresh."""
    speakers = {"Ann": "alloy", "Ben": "instruct:female, high pitch"}
    lines = ["Ann: A script kept between submissions.", "Ben: Its second line, designed.",
             "Ann: A third line, to be edited.", "Ben: And the designed voice again."]
    body = {"script": "\n".join(lines), "speakers": speakers, **SETTINGS}
    store = server.voices_dir / "script-pieces"
    before = len(list(store.glob("*.npz")))
    first = post(server, body).json()
    assert (first["segments_spoken"], first["segments_reused"]) == (4, 0)
    lines[2] = "Ann: A third line, edited now."
    mark = len(server.log_lines())
    edited = post(server, {**body, "script": "\n".join(lines)}).json()
    assert (edited["segments_spoken"], edited["segments_reused"]) == (1, 3)
    logged = [line for line in server.log_lines(mark) if "script request=" in line and "status=" in line]
    assert logged and "spoken=1" in logged[-1] and "reused=3" in logged[-1]
    pin = tmp_path / "alloy.npz"
    pin.write_bytes(httpx.get(f"{server.url}/v1/audio/voices/alloy?format=npz", headers=headers(), timeout=WAIT).content)
    expected = runtime_track(served_build, "\n".join(lines), {"Ann": str(pin), "Ben": speakers["Ben"]})
    np.testing.assert_array_equal(samples(base64.b64decode(edited["audio"])), expected)
    # Other settings are another script: nothing of it is reused.
    other = post(server, {**body, "script": "\n".join(lines), "num_steps": 3}).json()
    assert (other["segments_spoken"], other["segments_reused"]) == (4, 0)
    kept = list(store.glob("*.npz"))
    assert len(kept) == before + 9 and all(all(c in "0123456789abcdef" for c in p.stem) for p in kept)


def test_bad_scripts_and_bounds_are_refused_before_any_work(bounded):
    def refused(body: dict, status: int, fragment: str, param: str | None = "script"):
        answer = httpx.post(f"{bounded.url}/v1/audio/script", json=body, timeout=WAIT)
        assert answer.status_code == status, answer.text
        error = answer.json()["error"]
        assert fragment in error["message"] and error["param"] == param, error
        assert "\n" not in error["message"]

    start = len(bounded.log_lines())
    refused({"script": "A.\nB.\nC.\nD.\n", "format": "jsonl"}, 400, "line 1")  # JSONL that is not objects
    lines = "\n".join(json.dumps({"text": f"Segment {i}."}) for i in range(4))
    refused({"script": lines, "format": "jsonl"}, 400, "over the limit of 3")
    refused({"script": "x" * 130}, 400, "over the limit of 120")
    refused({"script": "1\n00:00:01,000 --> 00:00:30,000\nLong.\n", "format": "srt"}, 400, "over the limit of 20 s")
    refused({"script": "1\n00:00:01,000 --> 00:00:xx,000\nHi.\n", "format": "srt"}, 400, "cue 1")
    overlapping = "1\n00:00:01,000 --> 00:00:03,000\nOne.\n\n2\n00:00:02,000 --> 00:00:04,000\nTwo.\n"
    refused({"script": overlapping, "format": "srt"}, 400, "cue 2")
    refused({"script": "WEBVTT\n\n00:01.000 --> 00:02.000\n<v Carol>Hi.\n", "format": "vtt",
             "speakers": {"Alice": "alloy"}}, 400, "Carol")
    refused({"script": "Hello <break time=\"90s\"/> there."}, 400, "over the limit")
    refused({"script": "\x00\x01\x02binary\x00junk"}, 400, "binary")
    refused({"script": "Hi.", "speakers": {"A": "instruct:purple"}}, 400, "purple", "speakers")
    refused({"script": "Hi.", "speakers": "alloy"}, 400, "speakers must be an object", "speakers")
    refused({"script": "Hi.", "caption_words": True}, 400, "--include-asr", "caption_words")  # no recogniser here
    big = httpx.post(f"{bounded.url}/v1/audio/script", json={"script": "x" * 3000}, timeout=WAIT)
    assert big.status_code == 413 and "--max-script-bytes" in big.json()["error"]["message"]
    lines = [line for line in bounded.log_lines(start) if " script request=" in line]
    assert lines and all("segments=0 spoken=0" in line for line in lines)  # nothing was planned or spoken
    assert httpx.get(f"{bounded.url}/health").json()["outstanding_items"] == 0


def test_a_client_that_leaves_frees_its_slot_and_the_script_bound_holds(bounded):
    long_script = " ".join(f"Sentence {i} is here." for i in range(3))
    body = {"script": long_script, "num_steps": 200, "stream_format": "sse"}
    start = len(bounded.log_lines())
    with httpx.stream("POST", f"{bounded.url}/v1/audio/script", json=body, timeout=WAIT) as response:
        lines = response.iter_lines()
        first = next(line for line in lines if line.startswith("data: "))
        assert json.loads(first[6:])["type"] == "script.started"  # planned: its items are in the engine
        busy = httpx.post(f"{bounded.url}/v1/audio/script", json={"script": "Hi."}, timeout=WAIT)
        assert busy.status_code == 429 and "--max-scripts" in busy.json()["error"]["message"]
    deadline = time.monotonic() + WAIT  # the client has gone: the slot and the engine's items are freed
    while time.monotonic() < deadline:
        health = httpx.get(f"{bounded.url}/health", timeout=WAIT).json()
        if health["requests_in_flight"] == 0 and health["outstanding_items"] == 0:
            break
        time.sleep(0.05)
    assert health["requests_in_flight"] == 0 and health["outstanding_items"] == 0, health
    statuses = [dict(part.split("=", 1) for part in line.split() if "=" in part)["status"]
                for line in bounded.log_lines(start) if " script request=" in line]
    assert statuses[-1] == "disconnected" and "ok" not in statuses
    assert post(bounded, {"script": "Hi.", "num_steps": 2}).status_code == 200  # free for the next


def test_mcp_speak_script_returns_the_track_its_segments_and_captions(server):
    async def call():
        transport = streamable_http_client(f"{server.url}/mcp", http_client=create_mcp_http_client(headers=headers()))
        async with Client(transport) as client:
            spoken = await client.call_tool("speak_script", {"script": DIALOGUE, "speakers": SPEAKERS, "gap": 0.25,
                                                             **SEEDED})
            bad = await client.call_tool("speak_script", {"script": "Hi.", "format": "odt"})
            return spoken, bad

    spoken, bad = asyncio.run(call())
    assert not spoken.is_error
    audio, summary, captions = spoken.content
    assert audio.type == "audio" and audio.mime_type == "audio/wav"
    summary = json.loads(summary.text)
    assert len(summary["segments"]) == 4 and captions.text.startswith("1\n")
    served = post(server, {"script": DIALOGUE, "speakers": SPEAKERS, "gap": 0.25, **SEEDED}).json()  # the same
    np.testing.assert_array_equal(samples(base64.b64decode(audio.data)), samples(base64.b64decode(served["audio"])))
    written = [server.out / name for name in [p.split("/")[-1] for p in summary["written"]]]
    assert [p.suffix for p in written] == [".wav", ".srt"] and all(p.is_file() for p in written)
    assert bad.is_error and "format must be one of" in bad.content[0].text


def test_an_epub_through_the_script_door_is_the_runtimes_book_with_its_chapters(server, served_build, tmp_path):
    """A book's file in base64 (format epub): read as inference.py reads it, its quotations by the speaker named
    Dialogue; the answer's chapters start where each chapter's first segment's speech starts."""
    from codes.checks.sample_book import sample_book, write_epub
    from codes.runtime.book import Reading, book_script, parse_book
    from codes.runtime.script import speak_script
    from codes.runtime.synthesis import OmniVoiceOnnx
    from codes.serve.core.encode import pcm16

    written = sample_book(150, 2)
    data = write_epub(written)
    speakers = {"Narrator": "instruct:female, low pitch", "Dialogue": "instruct:male, high pitch"}
    done = post(server, {"script": base64.b64encode(data).decode("ascii"), "format": "epub", "speakers": speakers,
                         **SETTINGS}).json()
    assert done["book"]["title"] == written.title and done["book"]["author"] == written.author
    chapters = done["book"]["chapters"]
    assert [c["title"] for c in chapters] == [c.title for c in written.chapters]
    assert [c["start"] for c in chapters] == [done["segments"][c["first_segment"]]["start"] for c in chapters]
    assert {s["speaker"] for s in done["segments"]} == {"Narrator", "Dialogue"}
    book = book_script(parse_book(data, "epub"), Reading(dialogue_speaker="Dialogue"))
    tts = OmniVoiceOnnx(served_build, threads=1)
    rendered = speak_script(tts, book.script, speakers, seed=SETTINGS["seed"],
                            **{k: v for k, v in SETTINGS.items() if k != "seed"})
    np.testing.assert_array_equal(samples(base64.b64decode(done["audio"])),
                                  np.frombuffer(pcm16(rendered.audio, RATE), np.int16))
    text = "# A Title\n\n## One\n\nFirst words.\n\n## Two\n\nSecond words.\n"
    markdown = post(server, {"script": text, "format": "markdown", "speakers": {"Narrator": "alloy"}, **SEEDED}).json()
    assert [c["title"] for c in markdown["book"]["chapters"]] == ["One", "Two"]

    async def call():  # MCP's speak_script takes a book as the HTTP door does
        transport = streamable_http_client(f"{server.url}/mcp", http_client=create_mcp_http_client(headers=headers()))
        async with Client(transport) as client:
            return await client.call_tool("speak_script", {"script": text, "format": "markdown",
                                                           "speakers": {"Narrator": "alloy"}, **SEEDED})

    spoken = asyncio.run(call())
    assert not spoken.is_error
    audio, summary, _ = spoken.content
    assert json.loads(summary.text)["book"] == markdown["book"]
    np.testing.assert_array_equal(samples(base64.b64decode(audio.data)), samples(base64.b64decode(markdown["audio"])))


def test_a_bad_book_is_refused_before_any_work(bounded):
    from codes.checks.sample_book import sample_book, write_epub

    def refused(body: dict, status: int, fragment: str):
        answer = httpx.post(f"{bounded.url}/v1/audio/script", json=body, timeout=WAIT)
        assert answer.status_code == status, answer.text
        assert fragment in answer.json()["error"]["message"], answer.text

    refused({"script": "not base64 at all!", "format": "epub"}, 400, "base64")
    refused({"script": base64.b64encode(b"PK\x03\x04 a cut zip").decode(), "format": "epub"}, 400, "not a readable EPUB")
    big = base64.b64encode(write_epub(sample_book(100, 1))).decode()  # a cover image and all: over 2000 bytes
    refused({"script": big, "format": "epub"}, 413, "--max-script-bytes")
