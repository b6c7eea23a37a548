"""A clip without its transcript, through serve.py's doors: a real server on the tiny build with the tiny random
Whisper inside (optimize.py --include-asr), the HTTP upload (httpx multipart), MCP's save_voice (the `mcp` SDK's
client) and a speech request's one-off clone; the transcript each stores is what OmniVoiceOnnx.transcribe_reference
gives for that clip. A server without a recogniser refuses the same requests in tests/serve/test_serve.py."""

from __future__ import annotations

import asyncio
import base64
import io

import httpx
import numpy as np
import pytest
import soundfile
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from helpers.scripts import last_error_line, run_script
from helpers.serving import FAST, RATE, Server, pcm_samples, speak
from helpers.synthesis_inputs import reference_clip

WAIT = 120  # seconds a client waits for an answer before the test fails
GREEDY = {"seed": 7, "position_temperature": 0.0, "class_temperature": 0.0}


@pytest.fixture(scope="module")
def server(asr_build, tmp_path_factory):
    folder = tmp_path_factory.mktemp("transcribing")
    srv = Server(asr_build, folder / "voices", folder / "server.log")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def heard(asr_build, tmp_path_factory) -> str:
    """What the runtime hears in the test clip, without the server."""
    from codes.runtime.synthesis import OmniVoiceOnnx

    path = tmp_path_factory.mktemp("clip") / "clip.wav"
    path.write_bytes(clip_bytes())
    text = OmniVoiceOnnx(asr_build, threads=1).transcribe_reference(str(path))
    assert len(text) > 10  # the random Whisper hears words in it, or the comparisons below prove little
    return text


def clip_bytes(samples: np.ndarray | None = None, rate: int = RATE, subtype: str = "FLOAT") -> bytes:
    buffer = io.BytesIO()
    soundfile.write(buffer, reference_clip() if samples is None else samples, rate, format="WAV", subtype=subtype)
    return buffer.getvalue()


def upload(srv: Server, name: str, data: bytes, **fields) -> httpx.Response:
    return httpx.post(f"{srv.url}/v1/audio/voices", data={"name": name, **fields},
                      files={"file": ("clip.wav", data, "audio/wav")}, timeout=WAIT)


def listed(srv: Server) -> dict[str, dict]:
    return {voice["id"]: voice for voice in httpx.get(f"{srv.url}/v1/audio/voices", timeout=WAIT).json()["voices"]}


def saved_files(srv: Server) -> list:
    return sorted(path.relative_to(srv.voices_dir) for path in srv.voices_dir.rglob("*"))


def test_the_server_says_it_transcribes(server):
    assert httpx.get(f"{server.url}/v1/audio/defaults", timeout=WAIT).json()["transcribes_clips"] is True


def test_an_http_upload_without_its_transcript_is_saved_with_what_was_heard_and_speaks(server, heard):
    made = upload(server, "Heard Voice", clip_bytes())
    assert made.status_code == 200, made.text
    assert made.json() == {"id": "heard-voice", "name": "heard-voice", "transcript": heard}
    assert listed(server)["heard-voice"]["transcript"] == heard
    from codes.runtime.request import Voice

    assert Voice.load(server.voices_dir / "heard-voice.npz").text == heard
    saved = speak(server, text="Spoken by a voice nobody wrote down.", voice="heard-voice", **GREEDY)
    assert len(pcm_samples(saved)) > RATE // 2
    # The one-off clone of the same clip, without ref_text, hears the same and so speaks the same.
    body = {"model": "omnivoice", "input": "Spoken by a voice nobody wrote down.", "response_format": "pcm",
            "ref_audio": base64.b64encode(clip_bytes()).decode("ascii"), **FAST, **GREEDY}
    once = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=WAIT)
    assert once.status_code == 200, once.text
    assert once.content == saved
    # A transcript given is kept as given: the recogniser is only for clips without one.
    given = upload(server, "given-voice", clip_bytes(), text="Words the user typed.")
    assert given.status_code == 200 and given.json()["transcript"] == "Words the user typed."
    assert listed(server)["given-voice"]["transcript"] == "Words the user typed."


def test_mcp_save_voice_without_a_transcript_answers_what_it_heard(server, heard):
    clip = server.voices_dir / "agent-clip.wav"
    clip.write_bytes(clip_bytes())

    async def save():
        async with Client(streamable_http_client(f"{server.url}/mcp")) as client:
            saved = await client.call_tool("save_voice", {"audio_path": str(clip), "name": "agent-heard"})
            voices = await client.call_tool("list_voices", {})
            spoken = await client.call_tool("speak", {"text": "Cloned.", "voice": "agent-heard", "num_steps": 4})
            return saved, voices, spoken

    saved, voices, spoken = asyncio.run(asyncio.wait_for(save(), WAIT))
    assert not saved.is_error, saved.content[0].text
    assert f"(transcript: {heard!r})" in saved.content[0].text
    entry = next(voice for voice in voices.structured_content["result"] if voice["id"] == "agent-heard")
    assert entry["transcript"] == heard
    assert not spoken.is_error and spoken.content[0].type == "audio"


@pytest.mark.parametrize("samples,rate,code,fragment", [
    (np.zeros(0, np.float32), RATE, "unreadable_audio", "empty"),  # a WAV with a header and no audio
    (np.zeros(3 * RATE, np.float32), RATE, "unreadable_audio", "empty after silence removal"),
    (np.zeros(31 * 8000, np.float32), 8000, "clip_too_long", "--max-upload-seconds"),
])
def test_an_empty_silent_or_too_long_clip_is_one_clear_error_and_nothing_is_saved(server, samples, rate, code,
                                                                                 fragment):
    before = saved_files(server)
    refused = upload(server, "refused", clip_bytes(samples, rate, "PCM_16"))
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == code and fragment in error["message"] and "\n" not in error["message"]
    assert saved_files(server) == before and "refused" not in listed(server)
    assert httpx.get(f"{server.url}/health", timeout=WAIT).json()["requests_in_flight"] == 0


def test_asr_dir_lends_another_builds_recogniser(served_build, asr_build, tmp_path):
    bad = run_script("serve.py", "--model_dir", served_build, "--voices_dir", tmp_path / "voices", "--asr_dir",
                     tmp_path)
    assert bad.returncode == 2 and "ready:" not in bad.stdout
    assert "holds no recogniser" in last_error_line(bad) and "--asr_dir" in last_error_line(bad)
    srv = Server(served_build, tmp_path / "voices", tmp_path / "server.log", "--asr_dir", str(asr_build))
    try:
        assert httpx.get(f"{srv.url}/v1/audio/defaults", timeout=WAIT).json()["transcribes_clips"] is True
        made = upload(srv, "lent", clip_bytes())
        assert made.status_code == 200, made.text
        assert len(made.json()["transcript"]) > 10
    finally:
        srv.stop()


def test_the_playground_saves_a_clip_alone_and_shows_what_was_heard(server, heard, tmp_path):
    from playwright.sync_api import expect

    from helpers.browser import Visit, chromium

    clip = tmp_path / "my clip.wav"
    clip.write_bytes(clip_bytes())
    with chromium() as browser:
        visit = Visit(browser, server.url, None)
        try:
            page = visit.page
            transcript = page.get_by_role("textbox", name="Transcript", exact=True)
            expect(transcript).to_have_accessible_description("May be left empty: the server transcribes the clip.")
            page.get_by_label("Reference clip").set_input_files(clip)
            page.get_by_role("textbox", name="Voice name", exact=True).fill("Page Heard")
            with page.expect_request(lambda request: request.url.endswith("/v1/audio/voices")
                                     and request.method == "POST") as sent:
                page.get_by_role("button", name="Save voice", exact=True).click()
            expect(page.get_by_role("status").filter(has_text="Saved")).to_have_text(
                f'Saved the voice "page-heard". Heard: "{heard}".')
            assert 'name="text"' not in (sent.value.post_data or "")  # the clip went alone
            expect(page.get_by_role("combobox", name="Voice", exact=True)).to_have_value("page-heard")
            expect(page.get_by_role("alert")).to_have_text("")
            assert visit.errors == []
        finally:
            visit.close()
    assert listed(server)["page-heard"]["transcript"] == heard
