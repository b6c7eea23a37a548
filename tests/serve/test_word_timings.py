"""Word timings on the server's doors (issue 44): the stream door's `timing` events, SSE's
`speech.audio.timing` and MCP's `timings` carry `words` when a request asks and the build aligns, each word
measured by the recogniser on the piece's own audio (never spread by letter count), and a piece's audio
goes out before its words are known. Through the official clients (websockets, httpx, the mcp SDK), on the
tiny build with a tiny-whisper recogniser made with word timings."""

from __future__ import annotations

import asyncio
import base64
import json
import re
from pathlib import Path

import httpx
import numpy as np
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from websockets.sync.client import connect

from helpers.serving import RATE, Server

WAIT = 300
REPLY = "Sure, the lights are on now. Anything else I can do for you today?"
START = {"type": "start", "voice": "alloy", "num_steps": 4, "seed": 11, "language": "en", "word_timings": True}


@pytest.fixture(scope="module")
def server(asr_build, tmp_path_factory):
    folder = tmp_path_factory.mktemp("words")
    srv = Server(asr_build, folder / "voices", folder / "server.log")
    srv.ws_url = srv.url.replace("http://", "ws://") + "/v1/audio/speech/stream"
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def tts(asr_build):
    from codes.runtime.synthesis import OmniVoiceOnnx

    return OmniVoiceOnnx(asr_build, threads=1)


def stream(srv: Server, start: dict, text: str) -> list:
    """The stream door's messages in order: bytes for audio frames, dicts for the rest."""
    messages = []
    with connect(srv.ws_url, open_timeout=WAIT) as ws:
        ws.send(json.dumps(start))
        ws.send(json.dumps({"type": "text", "text": text}))
        ws.send(json.dumps({"type": "end"}))
        while True:
            message = ws.recv(timeout=WAIT)
            messages.append(message if isinstance(message, bytes) else json.loads(message))
            if isinstance(messages[-1], dict) and messages[-1]["type"] in ("done", "error"):
                assert messages[-1]["type"] == "done", messages[-1]
                return messages


def check_words(timing: dict, audio: np.ndarray, tts) -> None:
    """The piece's words are its text's, in order, and lie in its audio. (Chunks that wait for the aligner
    together share its windows, so a chunk's times depend on its neighbours: the packed alignment is held to
    openai-whisper's in tests/runtime/test_aligner.py.)"""
    words = timing["words"]
    assert words, timing
    assert all(timing["start"] - 1e-3 <= w["start"] <= w["end"] <= timing["end"] + 1e-3 for w in words)
    assert all(a["start"] <= b["start"] for a, b in zip(words, words[1:]))
    assert [w["word"] for w in words] == tts.load_aligner().words_of(timing["text"], "en")


def test_the_stream_doors_timings_carry_each_words_time_after_its_audio(server, tts):
    messages = stream(server, START, REPLY)
    audio = np.frombuffer(b"".join(m for m in messages if isinstance(m, bytes)), np.int16)
    timings = [m for m in messages if isinstance(m, dict) and m["type"] == "timing"]
    assert len(timings) >= 2 and " ".join(t["text"] for t in timings) == REPLY
    heard = 0  # samples received before each timing: its own piece's audio came first
    for message in messages:
        if isinstance(message, bytes):
            heard += len(message) // 2
        elif message["type"] == "timing":
            assert heard >= round(message["end"] * RATE)
            check_words(message, audio, tts)
    spoken = " ".join(w["word"] for t in timings for w in t["words"])
    assert spoken.split() == REPLY.split()  # every word written, each once, punctuation on its word
    plain = stream(server, {**START, "word_timings": False}, REPLY)  # not asked: chunk timings, the same audio
    assert all("words" not in m for m in plain if isinstance(m, dict) and m["type"] == "timing")
    assert b"".join(m for m in plain if isinstance(m, bytes)) == audio.tobytes()


def test_sse_timings_and_mcp_timings_carry_words_and_defaults_say_so(server, tts):
    assert httpx.get(f"{server.url}/v1/audio/defaults", timeout=WAIT).json()["word_timings"] is True
    body = {"model": "omnivoice", "input": REPLY, "voice": "alloy", "response_format": "pcm", "stream_format": "sse",
            "num_steps": 4, "seed": 11, "language": "en", "word_timings": True}
    events = []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=WAIT) as response:
        events = [json.loads(line[6:]) for line in response.iter_lines() if line.startswith("data: ")]
    audio = np.frombuffer(b"".join(base64.b64decode(e["audio"]) for e in events if e["type"] == "speech.audio.delta"),
                          np.int16)
    timings = [e for e in events if e["type"] == "speech.audio.timing"]
    assert timings and events[-1]["type"] == "speech.audio.done"
    for timing in timings:
        check_words(timing, audio, tts)

    async def mcp_timings():
        async with Client(streamable_http_client(f"{server.url}/mcp")) as client:
            result = await client.call_tool("speak", {"text": REPLY, "num_steps": 4, "seed": 11, "language": "en",
                                                      "response_format": "pcm", "timings": True, "word_timings": True})
            return result.content

    audio_content, _, timings_content = asyncio.run(mcp_timings())
    mcp_audio = np.frombuffer(base64.b64decode(audio_content.data), np.int16)
    mcp_timings = json.loads(timings_content.text)["timings"]
    # one request's words, any door (their times depend on which chunks waited for the aligner together)
    assert [[w["word"] for w in t["words"]] for t in mcp_timings] == [[w["word"] for w in t["words"]] for t in timings]
    assert mcp_audio.tobytes() == audio.tobytes()


def test_the_playground_highlights_each_word_as_it_is_heard(server):
    from playwright.sync_api import expect

    from helpers.browser import Visit, chromium

    with chromium() as browser:
        visit = Visit(browser, server.url, None)
        try:
            page = visit.page
            expect(page.get_by_role("combobox", name="Voice", exact=True)).to_have_value("alloy")
            page.get_by_role("textbox", name="Text", exact=True).fill(REPLY)
            page.get_by_role("spinbutton", name="Steps", exact=True).fill("4")
            with page.expect_request(lambda request: request.url.endswith("/v1/audio/speech")) as sent:
                page.get_by_role("button", name="Speak", exact=True).click()
            assert sent.value.post_data_json["word_timings"] is True  # the server said it times words
            expect(page.get_by_role("link", name="Download", exact=True)).to_be_visible()
            words = page.get_by_label("Words heard").locator("span")
            expect(words).to_have_count(len(REPLY.split()))
            assert words.all_inner_texts() == REPLY.split()
            # every word marked at some moment while the finished file plays again, as the page's own observer saw
            page.get_by_label("Words heard").evaluate("""words => {
                window.marked = new Set();
                new MutationObserver(() => words.querySelectorAll('[aria-current="true"]').forEach(
                    span => window.marked.add([...words.children].indexOf(span)))).observe(
                    words, {subtree: true, attributes: true, attributeFilter: ["aria-current"]});
            }""")
            page.get_by_label("Speech", exact=True).evaluate("audio => { audio.currentTime = 0; audio.play(); }")
            page.wait_for_function("() => document.getElementById('player').ended", polling=100)
            marked = page.evaluate("() => [...window.marked].sort((a, b) => a - b)")
            assert marked == list(range(len(REPLY.split()))), marked

            page.get_by_role("tab", name="Script", exact=True).click()  # and the Script tab's word captions
            page.get_by_role("checkbox", name=re.compile("^Captions word by word")).check()
            page.get_by_role("textbox", name="Script", exact=True).fill("Alice: Good morning.\nBob: Hello there.")
            page.get_by_role("spinbutton", name="Steps", exact=True).fill("4")
            page.get_by_role("spinbutton", name="Seed", exact=True).fill("3")
            with page.expect_request(lambda request: request.url.endswith("/v1/audio/script")) as sent:
                page.get_by_role("button", name="Speak script", exact=True).click()
            assert sent.value.post_data_json["caption_words"] is True
            with page.expect_download() as download:
                page.get_by_role("link", name="Download captions", exact=True).click()
            captions = Path(download.value.path()).read_text(encoding="utf-8")
            served = httpx.post(f"{server.url}/v1/audio/script", timeout=WAIT,
                                json={**sent.value.post_data_json, "stream_format": "json"}).json()
            assert captions == served["captions"]  # the server's word-level captions, as the page saved them
            assert [w["word"] for s in served["segments"] for w in s["words"]] == "Good morning. Hello there.".split()
            expect(page.get_by_role("alert")).to_have_text("")
            assert visit.errors == []
        finally:
            visit.close()


def test_a_script_request_gives_word_level_captions(server):
    from codes.runtime.script import parse_script

    body = {"script": "Alice: Good morning, everyone.\nBob: Hello Alice, nice to see you.", "language": "en",
            "speakers": {"Alice": "instruct:female", "Bob": "instruct:male"}, "num_steps": 4, "seed": 2,
            "caption_words": True, "captions": "srt"}
    done = httpx.post(f"{server.url}/v1/audio/script", json=body, timeout=WAIT).json()
    assert done["type"] == "script.done", done
    segments = done["segments"]
    for segment in segments:
        assert segment["words"], segment
        assert all(segment["start"] - 1e-6 <= w["start"] <= w["end"] <= segment["end"] + 1e-6 for w in segment["words"])
    assert [w["word"] for s in segments for w in s["words"]] == "Good morning, everyone. Hello Alice, nice to see you.".split()
    cues = parse_script(done["captions"], "srt").segments
    assert len(cues) > len(segments)  # a cue a word (words aligned to one instant join the cue before)
    vtt = httpx.post(f"{server.url}/v1/audio/script", json={**body, "captions": "vtt"}, timeout=WAIT).json()["captions"]
    assert vtt.startswith("WEBVTT") and "<00:00:" in vtt  # each word's time as an inline timestamp
