"""The playground page at `/` (codes/serve/doors/playground/) as a person uses it: Debian's chromium, headless,
driven by Playwright, against one real serve.py on the tiny build (with --api-key, so the key's round
trip is tried), and the same page once through serve.py --ray.

Controls are found only by role and accessible name, as a screen reader finds them; the microphone is
Chromium's fake device. Waits are for events the page shows (a status line, an enabled button, the
audio element's clock), never for guessed seconds.
"""

from __future__ import annotations

import base64
import io
import json
import os
import re
import signal
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
import soundfile
from playwright.sync_api import expect

from codes.runtime.data import load_table
from codes.runtime.text.voice_design import LANGUAGE_IDS, language_choices, resolve_instruct
from helpers.browser import Visit, chromium
from helpers.serving import TWO_SENTENCES, Server, started
from helpers.synthesis_inputs import REF_TEXT, reference_clip

KEY = "playground-key"
STEPS = "4"


@pytest.fixture(scope="module")
def server(served_build, tmp_path_factory):
    yield from started(served_build, tmp_path_factory, "playground", "--api-key", KEY)


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


@pytest.fixture
def visit(browser, server):
    opened = []

    def open_page(key: str | None = KEY, url: str = server.url) -> Visit:
        opened.append(Visit(browser, url, key))
        return opened[-1]

    yield open_page
    for one in opened:
        one.close()


def voice_select(page):
    return page.get_by_role("combobox", name="Voice", exact=True)


def speak(page, text: str = TWO_SENTENCES, voice: str = "alloy"):
    """Speak `text` and wait for its Download link; returns the speech request's JSON body."""
    page.get_by_role("textbox", name="Text", exact=True).fill(text)
    expect(voice_select(page).get_by_role("option", name=re.compile(f"^{voice}\\b"))).to_have_count(1)
    voice_select(page).select_option(voice)
    page.get_by_role("spinbutton", name="Steps", exact=True).fill(STEPS)
    with page.expect_request(lambda request: request.url.endswith("/v1/audio/speech")) as sent:
        page.get_by_role("button", name="Speak", exact=True).click()
    expect(page.get_by_role("link", name="Download", exact=True)).to_be_visible()
    return sent.value.post_data_json


def downloaded_audio(page) -> tuple[np.ndarray, int]:
    with page.expect_download() as download:
        page.get_by_role("link", name="Download", exact=True).click()
    return soundfile.read(io.BytesIO(Path(download.value.path()).read_bytes()), dtype="float32")


def downloaded_container(page) -> str:
    """The container of the Download link's file, as FFmpeg reads it, with at least half a second of audio."""
    import av

    with page.expect_download() as download:
        page.get_by_role("link", name="Download", exact=True).click()
    with av.open(download.value.path()) as container:
        stream = container.streams.audio[0]
        seconds = sum(frame.samples for frame in container.decode(stream)) / stream.rate
        assert seconds > 0.5, seconds
        return container.format.name


def upload(name: str, srv: Server) -> None:
    """A saved voice made through the API, as another client would make it."""
    buffer = io.BytesIO()
    soundfile.write(buffer, reference_clip(seed=1), 24000, format="WAV")
    response = httpx.post(f"{srv.url}/v1/audio/voices", headers={"Authorization": f"Bearer {KEY}"}, timeout=60,
                          data={"name": name, "text": REF_TEXT}, files={"file": ("clip.wav", buffer.getvalue())})
    assert response.status_code == 200, response.text


def saved_ids(srv: Server) -> set[str]:
    response = httpx.get(f"{srv.url}/v1/audio/voices", headers={"Authorization": f"Bearer {KEY}"}, timeout=60)
    response.raise_for_status()
    return {voice["id"] for voice in response.json()["voices"] if voice.get("kind") != "design"}


def test_the_page_loads_without_the_key_and_asks_nothing_of_another_origin(visit, server):
    for path in ("/", "/playground/app.js", "/playground/style.css"):
        response = httpx.get(f"{server.url}{path}", timeout=60)  # no Authorization: the page is not behind the key
        assert response.status_code == 200, (path, response.text)
        assert "default-src 'self'" in response.headers["content-security-policy"]
    assert httpx.get(f"{server.url}/v1/audio/voices", timeout=60).status_code == 401  # the API still is
    assert httpx.get(f"{server.url}/playground/../serve.py", timeout=60).status_code == 404

    page = (opened := visit()).page
    expect(voice_select(page).get_by_role("option", name=re.compile("^alloy "))).to_have_count(1)
    for role, name in (("textbox", "Text"), ("textbox", "API key"), ("textbox", "Transcript"),
                       ("textbox", "Voice name"), ("combobox", "Voice"), ("combobox", "Language"),
                       ("combobox", "Gender"), ("combobox", "Age"), ("combobox", "Pitch"), ("combobox", "Accent"),
                       ("button", "Speak"), ("button", "Record"), ("button", "Stop"), ("button", "Save voice"),
                       ("button", "Delete voice"), ("button", "Speak with clip"), ("spinbutton", "Speed"),
                       ("spinbutton", "Duration (s)"), ("spinbutton", "Steps"), ("spinbutton", "Guidance"),
                       ("checkbox", "Denoise"), ("checkbox", "Pre-processing"), ("checkbox", "Post-processing"),
                       ("checkbox", "Normalize text")):
        expect(page.get_by_role(role, name=name, exact=True)).to_have_count(1)
    expect(page.get_by_label("Reference clip")).to_have_attribute("type", "file")
    expect(page.get_by_role("alert")).to_have_text("")
    assert opened.errors == []
    origin = urlsplit(server.url)
    elsewhere = [request.url for request in opened.requests
                 if urlsplit(request.url)[:2] != origin[:2] and not request.url.startswith(("data:", "blob:"))]
    assert elsewhere == []


def test_the_page_offers_what_the_runtime_accepts(visit):
    """The design selects hold upstream's controlled vocabulary (codes/runtime/data/instruct.json) and
    the languages are ids the runtime knows."""
    page = visit().page
    vocabulary = {category["name"]: [*category.get("en_to_zh", category.get("items", []))]
                  for category in load_table("instruct")["categories"]}

    def values(name):
        options = page.get_by_role("combobox", name=name, exact=True).get_by_role("option")
        return [value for value in options.evaluate_all("options => options.map(o => o.value)") if value]

    # the lists are filled from GET /v1/audio/voice-design, the page carries none of its own
    page.wait_for_function("select => select.options.length > 1",
                           arg=page.get_by_role("combobox", name="Accent", exact=True).element_handle(), polling=50)

    assert values("Gender") == vocabulary["gender"]
    assert values("Age") == vocabulary["age"]
    assert values("Pitch") == vocabulary["pitch"]
    assert values("Accent") == vocabulary["accent"] + vocabulary["dialect"]
    assert vocabulary["style"] == ["whisper"]
    expect(page.get_by_role("checkbox", name="Whisper", exact=True)).to_have_count(1)
    languages = page.get_by_role("combobox", name="Language", exact=True)
    expect(languages).to_have_attribute("placeholder", "Auto")
    page.wait_for_function("input => input.list.options.length > 1", arg=languages.element_handle(), polling=50)
    listed = languages.evaluate("input => [...input.list.options].map(o => o.value)")
    assert listed == ["Auto", *(language["name"] for language in language_choices())]  # upstream's demo's list
    assert len(listed) == 1 + len(LANGUAGE_IDS) and {"Cantonese", "Japanese", "English"} <= set(listed)


def test_a_wrong_key_shows_an_alert_and_the_right_key_speaks(visit):
    opened = visit(key=None)
    page = opened.page
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("401")  # the voice list, asked for as the page loads
    key = page.get_by_role("textbox", name="API key", exact=True)
    key.fill("not-the-key")
    with page.expect_response(lambda response: response.url.endswith("/v1/audio/voices")) as refused:
        key.press("Enter")
    assert refused.value.status == 401 and refused.value.request.headers["authorization"] == "Bearer not-the-key"
    expect(alert).to_have_text("401: missing or wrong API key: send 'Authorization: Bearer <key>'")
    key.fill(KEY)
    key.press("Enter")
    expect(alert).to_have_text("")
    assert page.evaluate("localStorage.getItem('omnivoice-api-key')") == KEY

    page.get_by_role("textbox", name="Text", exact=True).fill(TWO_SENTENCES)
    voice_select(page).select_option("alloy")
    page.get_by_role("spinbutton", name="Steps", exact=True).fill(STEPS)
    with page.expect_request(lambda request: request.url.endswith("/v1/audio/speech")) as sent:
        page.get_by_role("button", name="Speak", exact=True).click()
    expect(page.get_by_role("progressbar")).to_be_visible()
    assert sent.value.headers["authorization"] == f"Bearer {KEY}"
    body = sent.value.post_data_json
    assert (body["voice"], body["stream_format"], body["num_steps"]) == ("alloy", "sse", 4)
    player = page.get_by_label("Speech").element_handle()
    page.wait_for_function("audio => audio.currentTime > 0.5", arg=player, polling=50)  # playing while it streams
    expect(page.get_by_role("link", name="Download", exact=True)).to_be_visible()
    expect(page.get_by_role("progressbar")).to_be_hidden()
    samples, rate = downloaded_audio(page)
    assert rate == 24000 and len(samples) > rate // 2 and np.abs(samples).max() > 0
    duration = page.get_by_label("Speech").evaluate("audio => audio.duration")  # the player holds the whole result
    assert duration == pytest.approx(len(samples) / rate, abs=0.01)
    assert alert.text_content() == ""


def test_a_typed_key_is_used_at_once_without_pressing_use_key(visit):
    """The key typed into the box is the key the very next request sends: Speak right after typing it
    speaks (no 401), and the voice list fills."""
    page = visit(key=None).page
    expect(page.get_by_role("alert")).to_contain_text("401")
    page.get_by_role("spinbutton", name="Steps", exact=True).fill(STEPS)
    page.get_by_role("textbox", name="API key", exact=True).fill(KEY)
    with page.expect_response(lambda response: response.url.endswith("/v1/audio/speech")) as answered:
        page.get_by_role("button", name="Speak", exact=True).click()
    assert answered.value.status == 200 and answered.value.request.headers["authorization"] == f"Bearer {KEY}"
    expect(page.get_by_role("link", name="Download", exact=True)).to_be_visible()
    expect(voice_select(page).get_by_role("option", name=re.compile("^alloy "))).to_have_count(1)
    expect(page.get_by_role("alert")).to_have_text("")


def test_the_language_search_sends_the_language_picked(visit):
    page = visit().page
    language = page.get_by_role("combobox", name="Language", exact=True)
    page.wait_for_function("input => input.list.options.length > 600", arg=language.element_handle(), polling=50)
    found = language.evaluate("input => [...input.list.options].map(o => o.value).filter(v => /canton/i.test(v))")
    assert found == ["Cantonese"]
    language.fill("Cantonese")
    assert speak(page, "Just a short one.")["language"] == "yue"
    language.fill("japanese")  # a name in any case, or an id
    assert speak(page, "Just a short one.")["language"] == "ja"
    language.fill("")
    assert "language" not in speak(page, "Just a short one.")  # Auto: the model tells
    language.fill("Klingon")
    page.get_by_role("button", name="Speak", exact=True).click()
    expect(page.get_by_role("alert")).to_have_text('unknown language "Klingon": pick one from the Language list, or Auto')


def test_the_advanced_controls_reach_the_request_and_the_server(visit, server):
    page = visit().page
    denoise = page.get_by_role("checkbox", name="Denoise", exact=True)
    expect(denoise).to_be_checked()  # the server's defaults (GET /v1/audio/defaults)
    expect(page.get_by_role("checkbox", name="Normalize text", exact=True)).not_to_be_checked()
    expect(page.get_by_role("spinbutton", name="Guidance", exact=True)).to_have_attribute("placeholder", "2")
    page.get_by_role("spinbutton", name="Duration (s)", exact=True).fill("2.5")
    page.get_by_role("spinbutton", name="Guidance", exact=True).fill("1.5")
    page.get_by_role("spinbutton", name="Speed", exact=True).fill("1.25")
    denoise.uncheck()
    page.get_by_role("checkbox", name="Pre-processing", exact=True).uncheck()
    page.get_by_role("checkbox", name="Post-processing", exact=True).uncheck()
    page.get_by_role("checkbox", name="Normalize text", exact=True).check()
    start = len(server.log_lines())
    body = speak(page, "I have 25 apples.")
    asked = {"duration": 2.5, "guidance_scale": 1.5, "speed": 1.25, "num_steps": 4, "denoise": False,
             "preprocess_prompt": False, "postprocess_output": False, "normalize_text": True}
    assert {name: body[name] for name in asked} == asked
    (line,) = server.request_lines(start)
    assert json.loads(line["options"]) == {"num_steps": 4, "guidance_scale": 1.5, "denoise": False,
                                           "preprocess_prompt": False, "postprocess_output": False,
                                           "normalize_text": True}
    samples, rate = downloaded_audio(page)
    assert len(samples) / rate < 2.5 + 0.5  # duration asked for; post-processing off keeps its length (and pads)
    expect(page.get_by_role("alert")).to_have_text("")


def test_a_one_off_clone_from_an_uploaded_clip_speaks_and_saves_nothing(visit, server, tmp_path):
    clip = tmp_path / "once.wav"
    soundfile.write(clip, reference_clip(seed=2), 24000)
    saved_before, files_before = saved_ids(server), sorted(server.voices_dir.rglob("*"))
    page = visit().page
    expect(voice_select(page).get_by_role("option", name=re.compile("^alloy "))).to_have_count(1)
    options_before = voice_select(page).get_by_role("option").count()
    page.get_by_role("textbox", name="Text", exact=True).fill("Spoken once with a clip.")
    page.get_by_role("spinbutton", name="Steps", exact=True).fill(STEPS)
    page.get_by_label("Reference clip").set_input_files(clip)
    page.get_by_role("textbox", name="Transcript", exact=True).fill(REF_TEXT)
    with page.expect_request(lambda request: request.url.endswith("/v1/audio/speech")) as sent:
        page.get_by_role("button", name="Speak with clip", exact=True).click()
    body = sent.value.post_data_json
    assert base64.b64decode(body["ref_audio"]) == clip.read_bytes() and body["ref_text"] == REF_TEXT
    expect(page.get_by_role("link", name="Download", exact=True)).to_be_visible()
    samples, rate = downloaded_audio(page)
    assert len(samples) > rate // 2 and np.abs(samples).max() > 0
    expect(page.get_by_role("alert")).to_have_text("")
    assert saved_ids(server) == saved_before and sorted(server.voices_dir.rglob("*")) == files_before
    expect(voice_select(page).get_by_role("option")).to_have_count(options_before)


def test_a_one_off_clone_from_the_microphone_speaks_and_saves_nothing(visit, server):
    saved_before = saved_ids(server)
    page = visit().page
    page.get_by_role("textbox", name="Text", exact=True).fill("Spoken once with a recording.")
    page.get_by_role("spinbutton", name="Steps", exact=True).fill(STEPS)
    page.get_by_role("button", name="Record", exact=True).click()
    recording = page.get_by_role("status").filter(has_text="Record")
    expect(recording).to_have_text(re.compile(r"Recording [2-9]\.\d s"))
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(recording).to_have_text(re.compile(r"Recorded \d+\.\d s"))
    page.get_by_role("textbox", name="Transcript", exact=True).fill("Beep, beep.")
    with page.expect_response(lambda response: response.url.endswith("/v1/audio/speech")) as answered:
        page.get_by_role("button", name="Speak with clip", exact=True).click()
    assert answered.value.status == 200
    assert len(base64.b64decode(answered.value.request.post_data_json["ref_audio"])) > 1000
    expect(page.get_by_role("link", name="Download", exact=True)).to_be_visible()
    expect(page.get_by_role("alert")).to_have_text("")
    assert saved_ids(server) == saved_before


def test_the_format_picked_is_what_plays_and_downloads(visit):
    """MP3 streams into the player (a MediaSource) as it comes; FLAC, whose bytes come at the end, plays
    once complete. Each download is the server's own file in that format."""
    page = visit().page
    page.get_by_role("combobox", name="Format", exact=True).select_option("mp3")
    page.get_by_role("textbox", name="Text", exact=True).fill(TWO_SENTENCES)
    page.get_by_role("spinbutton", name="Steps", exact=True).fill(STEPS)
    with page.expect_request(lambda request: request.url.endswith("/v1/audio/speech")) as sent:
        page.get_by_role("button", name="Speak", exact=True).click()
    assert sent.value.post_data_json["response_format"] == "mp3"
    player = page.get_by_label("Speech").element_handle()
    page.wait_for_function("audio => audio.currentTime > 0.5", arg=player, polling=50)
    expect(page.get_by_role("link", name="Download", exact=True)).to_have_attribute("download", "speech.mp3")
    assert downloaded_container(page) == "mp3"

    page.get_by_role("combobox", name="Format", exact=True).select_option("flac")
    assert speak(page, "Just a short one.")["response_format"] == "flac"
    expect(page.get_by_role("link", name="Download", exact=True)).to_have_attribute("download", "speech.flac")
    samples, rate = downloaded_audio(page)
    assert rate == 24000 and len(samples) > 0
    expect(page.get_by_role("alert")).to_have_text("")


def test_api_errors_are_shown_as_their_messages(visit, server):
    upload("gone-soon", server)
    page = visit().page
    alert = page.get_by_role("alert")
    page.get_by_role("textbox", name="Text", exact=True).fill("word " * 1000)  # 5000 characters, past 4096
    page.get_by_role("button", name="Speak", exact=True).click()
    expect(alert).to_have_text(re.compile(r"^400: input is 5000 characters .*the limit is 4096$"))
    expect(page.get_by_role("progressbar")).to_be_hidden()

    expect(voice_select(page).get_by_role("option", name="gone-soon", exact=True)).to_have_count(1)
    voice_select(page).select_option("gone-soon")
    delete = httpx.delete(f"{server.url}/v1/audio/voices/gone-soon", headers={"Authorization": f"Bearer {KEY}"})
    assert delete.status_code == 200  # behind the page's back
    page.get_by_role("textbox", name="Text", exact=True).fill("Hello.")
    page.get_by_role("button", name="Speak", exact=True).click()
    expect(alert).to_contain_text("404: unknown voice 'gone-soon'")

    page.get_by_role("button", name="Save voice", exact=True).click()  # the page's own check, before any call
    expect(alert).to_have_text("choose a reference clip or record one first")


def test_the_design_selects_send_matching_instructions(visit):
    page = visit().page
    instructions = page.get_by_role("textbox", name="Instructions", exact=True)
    page.get_by_role("combobox", name="Gender", exact=True).select_option("female")
    page.get_by_role("combobox", name="Age", exact=True).select_option("elderly")
    page.get_by_role("combobox", name="Pitch", exact=True).select_option("low pitch")
    page.get_by_role("checkbox", name="Whisper", exact=True).check()
    page.get_by_role("combobox", name="Accent", exact=True).select_option("british accent")
    expect(instructions).to_have_value("female, elderly, low pitch, whisper, british accent")
    body = speak(page)
    assert body["instructions"] == "female, elderly, low pitch, whisper, british accent"
    assert resolve_instruct(body["instructions"]) == body["instructions"]

    page.get_by_role("combobox", name="Accent", exact=True).select_option("四川话")  # a dialect: the items in Chinese
    expect(instructions).to_have_value("女，老年，低音调，耳语，四川话")
    assert resolve_instruct(instructions.input_value()) == instructions.input_value()
    instructions.fill("male, very high pitch")  # the string is the user's to edit
    assert speak(page, "Just a short one.")["instructions"] == "male, very high pitch"
    expect(page.get_by_role("alert")).to_have_text("")


def test_cloning_an_uploaded_clip_saves_a_voice_that_then_speaks(visit, server, tmp_path):
    clip = tmp_path / "my clip.wav"
    soundfile.write(clip, reference_clip(), 24000)
    page = visit().page
    page.get_by_label("Reference clip").set_input_files(clip)
    page.get_by_role("textbox", name="Voice name", exact=True).fill("Uploaded Voice")
    steps = page.get_by_role("spinbutton", name="Steps", exact=True)
    expect(steps).to_have_attribute("placeholder", "32")  # the server's defaults have loaded
    transcript = page.get_by_role("textbox", name="Transcript", exact=True)
    expect(transcript).to_have_accessible_description("")  # this build has no recogniser: a transcript is needed
    page.get_by_role("button", name="Save voice", exact=True).click()
    expect(page.get_by_role("alert")).to_have_text("type what the clip says in Transcript")
    transcript.fill(REF_TEXT)
    page.get_by_role("button", name="Save voice", exact=True).click()
    expect(page.get_by_role("status").filter(has_text="Saved")).to_have_text('Saved the voice "uploaded-voice".')
    expect(voice_select(page)).to_have_value("uploaded-voice")
    assert "uploaded-voice" in saved_ids(server)
    assert speak(page, voice="uploaded-voice")["voice"] == "uploaded-voice"
    samples, rate = downloaded_audio(page)
    assert len(samples) > rate // 2
    expect(page.get_by_role("alert")).to_have_text("")


def test_cloning_from_the_microphone_saves_a_voice(visit, server):
    page = visit().page
    page.get_by_role("button", name="Record", exact=True).click()
    recording = page.get_by_role("status").filter(has_text="Record")
    expect(recording).to_have_text(re.compile(r"Recording [2-9]\.\d s"))  # two seconds of Chromium's fake microphone
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(recording).to_have_text(re.compile(r"Recorded \d+\.\d s"))
    page.get_by_role("textbox", name="Transcript", exact=True).fill("Beep, beep.")
    page.get_by_role("textbox", name="Voice name", exact=True).fill("from-the-microphone")
    page.get_by_role("button", name="Save voice", exact=True).click()
    expect(page.get_by_role("status").filter(has_text="Saved")).to_contain_text("from-the-microphone")
    expect(page.get_by_role("alert")).to_have_text("")
    assert "from-the-microphone" in saved_ids(server)


def test_deleting_a_voice_asks_first_then_removes_it_from_the_page_and_the_server(visit, server):
    upload("to-delete", server)
    page = visit().page
    option = voice_select(page).get_by_role("option", name="to-delete", exact=True)
    expect(option).to_have_count(1)
    voice_select(page).select_option("alloy")
    expect(page.get_by_role("button", name="Delete voice", exact=True)).to_be_disabled()  # a built-in voice stays
    voice_select(page).select_option("to-delete")

    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Delete voice", exact=True).click()
    expect(page.get_by_role("button", name="Delete voice", exact=True)).to_be_enabled()
    assert "to-delete" in saved_ids(server)  # refused in the dialog: kept

    asked = []
    page.once("dialog", lambda dialog: (asked.append(dialog.message), dialog.accept()))
    page.get_by_role("button", name="Delete voice", exact=True).click()
    expect(option).to_have_count(0)
    assert asked and "to-delete" in asked[0]
    assert "to-delete" not in saved_ids(server)
    expect(page.get_by_role("alert")).to_have_text("")


def open_script_tab(page):
    expect(voice_select(page).get_by_role("option", name=re.compile("^alloy "))).to_have_count(1)
    page.get_by_role("tab", name="Script", exact=True).click()
    expect(page.get_by_role("tab", name="Script", exact=True)).to_have_attribute("aria-selected", "true")
    expect(page.get_by_role("button", name="Speak", exact=True)).to_be_hidden()  # the Speak tab's panel is away


def speak_script(page) -> dict:
    """Press Speak script and wait for both Download links; returns the script request's JSON body."""
    page.get_by_role("spinbutton", name="Steps", exact=True).fill(STEPS)
    with page.expect_request(lambda request: request.url.endswith("/v1/audio/script")) as sent:
        page.get_by_role("button", name="Speak script", exact=True).click()
    expect(page.get_by_role("link", name="Download audio", exact=True)).to_be_visible()
    expect(page.get_by_role("link", name="Download captions", exact=True)).to_be_visible()
    return sent.value.post_data_json


def downloaded(page, link: str) -> bytes:
    with page.expect_download() as download:
        page.get_by_role("link", name=link, exact=True).click()
    return Path(download.value.path()).read_bytes()


def test_the_script_tab_speaks_a_dialogue_in_two_voices_with_its_captions(visit, server):
    from codes.runtime.script import parse_script

    page = (opened := visit()).page
    open_script_tab(page)
    page.get_by_role("combobox", name="Speaker 2 voice", exact=True).select_option("instruct:")
    page.get_by_role("textbox", name="Speaker 2 design", exact=True).fill("male, low pitch")
    script = 'Alice: Hello there. <break time="300ms"/> How are you?\nBob: Very well, thank you.'
    page.get_by_role("textbox", name="Script", exact=True).fill(script)
    page.get_by_role("spinbutton", name="Seed", exact=True).fill("7")
    expect(page.get_by_role("checkbox", name=re.compile("^Captions word by word"))).to_have_count(0)  # no recogniser
    body = speak_script(page)
    assert body["seed"] == 7 and body["speakers"] == {"Alice": "nova", "Bob": "instruct:male, low pitch"}
    assert body["format"] == "text" and body["stream_format"] == "sse" and body["gap"] == 0.3
    expect(page.get_by_role("status").filter(has_text="3 of 3 segments")).to_have_count(1)
    audio, rate = soundfile.read(io.BytesIO(downloaded(page, "Download audio")), dtype="int16")
    served = httpx.post(f"{server.url}/v1/audio/script", headers={"Authorization": f"Bearer {KEY}"}, timeout=300,
                        json={**body, "stream_format": "json", "response_format": "wav"}).json()
    expected, _ = soundfile.read(io.BytesIO(base64.b64decode(served["audio"])), dtype="int16")
    assert rate == 24000 and len(audio) == len(expected)  # the page's file is the server's track
    np.testing.assert_array_equal(audio, expected)
    captions = downloaded(page, "Download captions").decode("utf-8")
    assert [s.text for s in parse_script(captions, "srt").segments] == ["Hello there.", "How are you?",
                                                                         "Very well, thank you."]
    expect(page.get_by_role("alert")).to_have_text("")
    assert opened.errors == []


def test_the_script_tab_dubs_an_uploaded_srt_into_its_time_slots(visit, tmp_path):
    subtitles = tmp_path / "clip.srt"
    subtitles.write_bytes("\ufeff1\r\n00:00:00,500 --> 00:00:01,500\r\n<i>Alice: First.</i>\r\n\r\n"
                          "2\r\n00:00:02,000 --> 00:00:03,250\r\nBob: Second.\r\n".encode("utf-8"))
    page = (opened := visit()).page
    open_script_tab(page)
    page.get_by_label("Script file").set_input_files(subtitles)
    expect(page.get_by_role("combobox", name="Script format", exact=True)).to_have_value("srt")
    expect(page.get_by_role("textbox", name="Script", exact=True)).to_have_value(re.compile("00:00:02,000"))
    page.get_by_role("combobox", name="Captions", exact=True).select_option("vtt")
    body = speak_script(page)
    assert body["format"] == "srt" and "gap" not in body and body["captions"] == "vtt"
    audio, rate = soundfile.read(io.BytesIO(downloaded(page, "Download audio")), dtype="int16")
    assert len(audio) >= 3.25 * rate  # the track lasts until the last cue's end
    captions = downloaded(page, "Download captions").decode("utf-8")
    assert captions.startswith("WEBVTT") and "00:00:00.500 --> " in captions and "00:00:02.000 --> " in captions
    assert opened.errors == []


def test_the_script_tab_reads_an_uploaded_epub_and_lists_its_chapters(visit, server, tmp_path):
    from codes.checks.sample_book import sample_book, write_epub

    written = sample_book(120, 2)
    book = tmp_path / "harbour.epub"
    book.write_bytes(write_epub(written))
    page = (opened := visit()).page
    open_script_tab(page)
    page.get_by_label("Script file").set_input_files(book)
    expect(page.get_by_role("combobox", name="Script format", exact=True)).to_have_value("epub")
    expect(page.get_by_role("textbox", name="Script", exact=True)).to_have_value(re.compile("harbour.epub: an EPUB"))
    body = speak_script(page)
    assert body["format"] == "epub" and base64.b64decode(body["script"]) == book.read_bytes()
    chapters = page.get_by_role("list", name="Chapters").get_by_role("button")
    expect(chapters).to_have_count(2)
    expect(chapters.first).to_have_text(re.compile(f"^{re.escape(written.chapters[0].title)} \\(0:00\\)$"))
    chapters.nth(1).click()  # plays from the second chapter's first speech
    expect(page.locator("#script-player")).to_have_js_property("paused", False)
    assert page.eval_on_selector("#script-player", "player => player.currentTime") > 1
    expect(page.get_by_role("alert")).to_have_text("")
    assert opened.errors == []


def test_the_same_page_works_through_serve_py_ray(visit, served_build, tmp_path):
    """One Ray replica behind Ray Serve's proxy: the page, the key and the streamed speech pass through it."""
    from test_cluster import _alive, _descendants

    srv = Server(served_build, tmp_path / "voices", tmp_path / "server.log", "--ray", "--replicas", "1",
                 "--threads", "1", "--api-key", KEY)
    tree = _descendants(srv.proc.pid)
    try:
        opened = visit(url=srv.url)
        page = opened.page
        expect(voice_select(page).get_by_role("option", name=re.compile("^alloy "))).to_have_count(1)
        body = speak(page)
        assert body["stream_format"] == "sse"
        samples, rate = downloaded_audio(page)
        assert rate == 24000 and len(samples) > rate // 2
        expect(page.get_by_role("alert")).to_have_text("")
        assert opened.errors == []
    finally:
        srv.proc.send_signal(signal.SIGINT)  # serve.py --ray stops Ray on Ctrl-C
        try:
            srv.proc.wait(timeout=60)
        finally:
            for pid, start_time in _descendants(srv.proc.pid).items() | tree.items():
                if _alive(pid, start_time):
                    os.kill(pid, signal.SIGKILL)
            srv.stop()
