"""The web build's page (web/site/, the site's index.html) as a person uses it (issue 60, item 4): serve.py serves the
tiny web build at /web/ outside the API key, cross-origin isolated, and Debian's chromium, driven by Playwright, loads
it, speaks on WASM and on WebGPU (SwiftShader, on the CPU) through the site's own omnivoice.mjs, clones from a file
and from the fake microphone, and comes back offline from its service worker's cache.

The codes of what the page speaks at temperature 0 (its streamed pieces' codes, window.omnivoice.lastResult) are held
to inference.py's on the same build for at least 90% of cells, the issue's target for the web build. Controls are
found by role and accessible name; waits are for what the page shows, never for guessed seconds.
"""

from __future__ import annotations

import contextlib
import functools
import http.client
import http.server
import io
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import numpy as np
import pytest
import soundfile
from playwright.sync_api import expect, sync_playwright

from codes.runtime.text.voice_design import design_vocabulary, language_choices
from helpers.browser import CHROMIUM, FAKE_MEDIA, WAIT_MS
from helpers.scripts import ROOT, run_main
from helpers.serving import Server, free_port, started
from helpers.synthesis_inputs import REF_TEXT, reference_clip

WEB_BUILD = ("web", "--include-higgs")
KEY = "web-page-key"
TEXT = "Hello there this is the page speaking."  # one clause: one streamed piece, as generate's one chunk
STEPS = 8
# inference.py's flags and the runtime's request fields for the same utterance at temperature 0
AT_ZERO = {"num_steps": STEPS, "language": "en", "position_temperature": 0, "class_temperature": 0}
AT_ZERO_JS = {"language": "en", "numSteps": STEPS, "positionTemperature": 0, "classTemperature": 0}
AT_ZERO_FIELDS = {"Steps": str(STEPS), "Position temperature": "0", "Class temperature": "0"}  # the page's Advanced
AGREEMENT = 0.9  # the target for the web build: cells equal to inference.py's on the same build
# WebGPU on the CPU: SwiftShader's Vulkan gives Chromium an adapter (no shader-f16), slow but conformant.
WEBGPU = ["--enable-unsafe-webgpu", "--use-webgpu-adapter=swiftshader", "--enable-features=Vulkan"]
# what the page's statuses read while it downloads and while it speaks
DOWNLOADING = re.compile(r"^Downloading the model: \d+\.\d of \d+\.\d MB$")
STEPPING = re.compile(rf"^Speaking: step \d+ of {STEPS}\b")
KEPT = re.compile(r"^Kept in this browser \(\d+\.\d MB\): the next visit works offline\.$")
# onnxruntime-web writes its own warnings (e.g. shape ops kept on the CPU beside WebGPU) to the console's error
# stream: no error of the page's
ORT_WARNING = re.compile(r"\[W:onnxruntime:")
# every text the page's status lines take, kept in the page as it changes (a change lasts a moment)
WATCH_STATUSES = """
window.statusesSeen = [];
document.addEventListener("DOMContentLoaded", () => {
  for (const id of ["model-status", "speak-status"]) {
    const line = document.getElementById(id);
    new MutationObserver(() => window.statusesSeen.push(line.textContent)).observe(line, {childList: true,
      characterData: true, subtree: true});
  }
});
"""


@pytest.fixture(scope="module")
def web_build(builds):
    return builds.get(*WEB_BUILD)


@pytest.fixture(scope="module")
def server(web_build, tmp_path_factory):
    """serve.py on the web build itself: its site at /web/ without a flag, the API behind a key."""
    yield from started(web_build, tmp_path_factory, "web-site", "--api-key", KEY)


@pytest.fixture(scope="module")
def playwright():
    assert Path(CHROMIUM).is_file(), f"{CHROMIUM} is missing: run `make browser` (it installs Debian's chromium)"
    with sync_playwright() as started_playwright:  # one per thread: both browsers come from it
        yield started_playwright


@pytest.fixture(scope="module")
def browser(playwright):
    """Chromium with a WebGPU adapter on SwiftShader (and the fake microphone)."""
    launched = playwright.chromium.launch(executable_path=CHROMIUM, args=[*FAKE_MEDIA, *WEBGPU])
    yield launched
    launched.close()


@pytest.fixture(scope="module")
def plain_browser(playwright):
    """Chromium as it starts: headless, it gives no WebGPU adapter."""
    launched = playwright.chromium.launch(executable_path=CHROMIUM, args=FAKE_MEDIA)
    yield launched
    launched.close()


class SiteVisit:
    """One browser context on a site's page: what it logged as errors, every URL it asked for, and its statuses."""

    def __init__(self, browser, url: str, query: str = ""):
        self.url = url
        self.context = browser.new_context(base_url=url, viewport={"width": 390, "height": 844})  # a phone
        self.context.set_default_timeout(WAIT_MS)
        expect.set_options(timeout=WAIT_MS)
        self.context.add_init_script(WATCH_STATUSES)
        self.errors, self.requests = [], []
        self.page = self.open(query)

    def open(self, query: str = ""):
        page = self.context.new_page()
        page.on("console", lambda message: message.type == "error" and not ORT_WARNING.search(message.text)
                and self.errors.append(message.text))
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.on("request", lambda request: self.requests.append(request.url))
        page.goto(f"/web/{query}")
        return page

    def statuses(self) -> list[str]:
        return self.page.evaluate("window.statusesSeen")

    def close(self):
        self.context.close()


@pytest.fixture
def visit(browser, server):
    opened = []

    def open_site(query: str = "", url: str = server.url, on=browser) -> SiteVisit:
        opened.append(SiteVisit(on, url, query))
        return opened[-1]

    yield open_site
    for one in opened:
        one.close()


def loaded(page, backend: str = "wasm") -> None:
    """Waits until the model is loaded on `backend` (its status says Ready, Speak is enabled)."""
    expect(page.get_by_role("button", name="Speak", exact=True)).to_be_enabled()
    expect(page.get_by_role("status").filter(has_text="Ready")).to_contain_text("Ready: the web build")
    assert page.evaluate("window.omnivoice.tts.backend") == backend
    expect(page.get_by_role("alert")).to_have_text("")


def speak(page, text: str = TEXT, **fields: str) -> dict:
    """Speak `text` with the Advanced fields given (label: value) and wait for the WAV; returns
    window.omnivoice.lastResult less its samples and codes."""
    page.get_by_role("textbox", name="Text", exact=True).fill(text)
    if fields and not page.get_by_role("spinbutton", name="Steps", exact=True).is_visible():
        page.get_by_text("Advanced", exact=True).click()  # the settings' fold
    for label, value in fields.items():
        page.get_by_role("spinbutton", name=label, exact=True).fill(value)
    page.evaluate("window.omnivoice.lastResult = null")
    page.get_by_role("button", name="Speak", exact=True).click()
    expect(page.get_by_role("link", name="Download WAV", exact=True)).to_be_visible()
    expect(page.get_by_role("alert")).to_have_text("")
    return page.evaluate("(({audio, codes, ...rest}) => ({...rest, samples: audio.length}))"
                         "(window.omnivoice.lastResult)")


def downloaded_wav(page) -> tuple[np.ndarray, int]:
    with page.expect_download() as download:
        page.get_by_role("link", name="Download WAV", exact=True).click()
    return soundfile.read(io.BytesIO(Path(download.value.path()).read_bytes()), dtype="float32")


def page_codes(page) -> np.ndarray:
    """The codes [8, T] of what the page last spoke (its streamed pieces' codes, joined)."""
    found = page.evaluate("(({data, dims}) => ({data: Array.from(data, Number), dims}))"
                          "(window.omnivoice.lastResult.codes)")
    return np.asarray(found["data"], dtype=np.int64).reshape(found["dims"])


def python_codes(build: Path, folder: Path, *flags: str, **settings) -> np.ndarray:
    """inference.py's codes on `build` for TEXT at `settings` (its flag names), as --codes_out writes them."""
    out = folder / "codes.npy"
    options = [item for name, value in settings.items() for item in (f"--{name}", str(value))]
    run_main("inference.py", "--model_dir", build, "--text", TEXT, "--output", folder / "speech.wav", "--codes_out",
             out, "--quiet", *options, *flags, check=True)
    return np.load(out)


def agreement(page: np.ndarray, python: np.ndarray) -> float:
    assert page.shape == python.shape, (page.shape, python.shape)  # the same length: the same duration rule
    return float((page == python).mean())


@pytest.fixture(scope="module")
def reference_codes(web_build, tmp_path_factory):
    return python_codes(web_build, tmp_path_factory.mktemp("inference"), **AT_ZERO)


def heard_while_streaming(page, result: dict) -> None:
    """Each piece went onto the AudioContext as it came, one after the other, and the context played it."""
    scheduled = result["scheduled"]
    assert len(scheduled) == result["pieces"] >= 1
    for before, after in zip(scheduled, scheduled[1:]):
        assert after["at"] >= before["at"] + before["seconds"] - 1e-6
    assert sum(piece["seconds"] for piece in scheduled) == pytest.approx(result["samples"] / result["sampleRate"],
                                                                         abs=1e-3)
    page.wait_for_function("at => window.omnivoice.audioContext.currentTime > at", arg=scheduled[0]["at"] + 0.1,
                           polling=50)


def speaks_like_python(opened: SiteVisit, reference: np.ndarray, backend: str) -> None:
    """The page on `backend`: download progress, speech with step progress played as it streams, the WAV it offers,
    and codes at temperature 0 against inference.py's."""
    page = opened.page
    loaded(page, backend)
    assert any(DOWNLOADING.match(line) for line in opened.statuses()), opened.statuses()
    page.get_by_role("combobox", name="Language", exact=True).fill("English")
    result = speak(page, **AT_ZERO_FIELDS)
    assert result["request"] == {"text": TEXT, **AT_ZERO_JS}
    assert result["pieces"] == 1  # one clause: the stream's one piece is generate's whole utterance
    assert any(STEPPING.match(line) for line in opened.statuses()), opened.statuses()
    expect(page.get_by_role("status").filter(has_text="Spoke")).to_have_text(re.compile(r"^Spoke \d+\.\d s of audio"))
    heard_while_streaming(page, result)
    samples, rate = downloaded_wav(page)
    assert rate == result["sampleRate"] == 24000 and len(samples) == result["samples"] > rate // 4
    whole = np.asarray(page.evaluate("Array.from(window.omnivoice.lastResult.audio)"), dtype=np.float32)
    np.testing.assert_allclose(samples, np.clip(whole, -1, 1), atol=2 / 32768)  # the WAV holds what was played

    share = agreement(page_codes(page), reference)
    assert share >= AGREEMENT, f"{backend}: {share:.3f} of cells equal to inference.py's"
    assert opened.errors == []


def test_the_site_is_served_outside_the_key_cross_origin_isolated_and_offers_only_wasm_without_webgpu(
        server, web_build, visit, plain_browser):
    page_response = httpx.get(f"{server.url}/web/", timeout=60)  # no Authorization: the site is not behind the key
    assert page_response.status_code == 200 and page_response.headers["content-type"].startswith("text/html")
    assert 'src="page.mjs"' in page_response.text
    assert httpx.get(f"{server.url}/web", timeout=60).headers.get("location") == "/web/"
    wasm = sorted(web_build.rglob("*.wasm"))[0]  # onnxruntime-web's
    for path, kind in (("/web/", "text/html"), ("/web/page.mjs", "text/javascript"),
                       ("/web/omnivoice.mjs", "text/javascript"), ("/web/sw.js", "text/javascript"),
                       ("/web/page.css", "text/css"), ("/web/omnivoice_manifest.json", "application/json"),
                       (f"/web/{wasm.relative_to(web_build).as_posix()}", "application/wasm")):
        response = httpx.get(f"{server.url}{path}", timeout=60)
        assert response.status_code == 200, (path, response.text[:200])
        assert response.headers["content-type"].split(";")[0] == kind, path
        assert response.headers["cross-origin-opener-policy"] == "same-origin", path
        assert response.headers["cross-origin-embedder-policy"] == "require-corp", path
        assert response.headers["cross-origin-resource-policy"] == "same-origin", path
    asked = httpx.head(f"{server.url}/web/omnivoice_manifest.json", timeout=60)  # how the runtime asks for a file
    assert asked.status_code == 200 and asked.headers["cross-origin-embedder-policy"] == "require-corp"
    assert httpx.get(f"{server.url}/v1/audio/voices", timeout=60).status_code == 401  # the API still is behind it

    opened = visit(on=plain_browser)
    page = opened.page
    loaded(page)
    assert page.evaluate("crossOriginIsolated") is True
    expect(page.get_by_text("not cross-origin isolated")).to_be_hidden()
    backends = page.get_by_role("combobox", name="Backend", exact=True)
    assert backends.evaluate("select => [...select.options].map(o => o.value)") == ["wasm"]  # no adapter: no WebGPU
    expect(page.get_by_role("status").filter(has_text="offline")).to_have_text(KEPT)
    assert opened.errors == []
    origin = urlsplit(server.url)
    elsewhere = [url for url in opened.requests
                 if urlsplit(url)[:2] != origin[:2] and not url.startswith(("data:", "blob:"))]
    assert elsewhere == []  # nothing from another origin
    assert [url for url in opened.requests if not urlsplit(url).path.startswith("/web/")] == []  # nor from the API


TRAVERSALS = ["/web/../serve.py", "/web/%2e%2e/serve.py", "/web/.%2e/serve.py", "/web/..%2fserve.py",
              "/web/..%5cserve.py", "/web/%2e%2e%2f%2e%2e%2fserve.py", "/web/audio_tokenizer/../../serve.py",
              "/web/%252e%252e/serve.py", "/web//etc/passwd", "/web/%2fetc%2fpasswd", "/web/..", "/web/%00"]


def raw_get(url: str, target: str) -> tuple[int, bytes]:
    """GET `target` exactly as written (http.client sends the path as it is: no client folds ../ away)."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        connection.request("GET", target)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


@pytest.mark.parametrize("target", TRAVERSALS)
def test_no_path_reaches_outside_the_site(server, target):
    status, body = raw_get(server.url, target)
    assert status in (400, 404), (target, status)
    assert b"Serve an omnivoice-onnx build" not in body and b"root:" not in body


def test_web_site_serves_a_folder_beside_another_build_and_nothing_outside_it(served_build, tmp_path):
    """--web-site DIR: a site beside a build that is no web build (which alone serves none); links inside the folder
    that lead out of it are not served; a folder without index.html stops the start in one line."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "web" / "site", site)
    (site / "leak.py").symlink_to(ROOT / "serve.py")
    (site / "codes").symlink_to(ROOT / "codes", target_is_directory=True)
    (site / ".hidden").write_text("not served")
    plain = Server(served_build, tmp_path / "voices", tmp_path / "plain.log")
    try:
        assert httpx.get(f"{plain.url}/web/", timeout=60).status_code == 404  # a cpu_fp32 build has no site
    finally:
        plain.stop()
    given = Server(served_build, tmp_path / "voices", tmp_path / "given.log", "--web-site", str(site))
    try:
        response = httpx.get(f"{given.url}/web/", timeout=60)
        assert response.status_code == 200 and response.headers["cross-origin-embedder-policy"] == "require-corp"
        assert httpx.get(f"{given.url}/web/sw.js", timeout=60).headers["content-type"].startswith("text/javascript")
        for target in ("/web/leak.py", "/web/codes/__init__.py", "/web/.hidden", *TRAVERSALS):
            assert raw_get(given.url, target)[0] in (400, 404), target
    finally:
        given.stop()
    refused = subprocess.run([sys.executable, str(ROOT / "serve.py"), "--model_dir", str(served_build), "--web-site",
                              str(tmp_path / "voices"), "--port", str(free_port())], cwd=ROOT, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode != 0
    assert refused.stderr.strip().splitlines()[-1] == (f"error: --web-site {tmp_path / 'voices'} holds no index.html; "
                                                       "give a web build (optimize.py --device web --output DIR) or a "
                                                       "copy of its site")


def test_the_page_speaks_on_wasm_as_inference_py_does(visit, reference_codes):
    speaks_like_python(visit(), reference_codes, "wasm")


def test_the_page_speaks_on_webgpu_through_swiftshader_as_inference_py_does(visit, reference_codes):
    opened = visit()
    page = opened.page
    loaded(page)
    backends = page.get_by_role("combobox", name="Backend", exact=True)
    assert backends.evaluate("select => [...select.options].map(o => o.value)") == ["wasm", "webgpu"]
    page.evaluate("window.statusesSeen = []")
    backends.select_option("webgpu")
    expect(page.get_by_role("status").filter(has_text="Ready")).to_contain_text("WebGPU")
    speaks_like_python(opened, reference_codes, "webgpu")


def test_the_design_and_language_lists_are_the_runtimes_and_reach_the_request(visit):
    opened = visit()
    page = opened.page
    loaded(page)
    vocabulary = {category["name"]: [item["value"] for item in category["items"]] for category in design_vocabulary()}

    def values(name):
        return [value for value in page.get_by_role("combobox", name=name, exact=True).evaluate(
            "select => [...select.options].map(o => o.value)") if value]

    assert values("Gender") == vocabulary["gender"] and values("Age") == vocabulary["age"]
    assert values("Pitch") == vocabulary["pitch"]
    assert values("Accent") == vocabulary["accent"] + vocabulary["dialect"]  # they exclude each other: one list
    languages = page.get_by_role("combobox", name="Language", exact=True)
    listed = languages.evaluate("input => [...input.list.options].map(o => o.value)")
    assert listed == ["Auto", *(language["name"] for language in language_choices())]

    page.get_by_role("combobox", name="Gender", exact=True).select_option("female")
    page.get_by_role("combobox", name="Pitch", exact=True).select_option("low pitch")
    page.get_by_role("checkbox", name="Whisper", exact=True).check()
    page.get_by_role("combobox", name="Accent", exact=True).select_option("british accent")
    instructions = page.get_by_role("textbox", name="Instructions", exact=True)
    expect(instructions).to_have_value("female, low pitch, whisper, british accent")
    languages.fill("japanese")  # a name in any case, or an id
    result = speak(page, "Just a short one, and then a second part that goes on.", Steps="4")
    assert result["request"]["instruct"] == "female, low pitch, whisper, british accent"
    assert result["request"]["language"] == "ja"
    assert result["pieces"] >= 2  # the first clause early, then the rest
    heard_while_streaming(page, result)

    languages.fill("Klingon")
    page.get_by_role("button", name="Speak", exact=True).click()
    expect(page.get_by_role("alert")).to_have_text(
        'unknown language "Klingon": pick one from the Language list, or Auto')
    assert opened.errors == []


def test_cloning_from_a_file_needs_its_transcript_and_speaks_as_inference_py_does(visit, web_build, tmp_path):
    clip = tmp_path / "reference.wav"
    soundfile.write(clip, reference_clip(), 24000, subtype="PCM_16")
    opened = visit()
    page = opened.page
    loaded(page)
    page.get_by_label("Reference clip").set_input_files(clip)
    expect(page.get_by_role("status").filter(has_text="Clip:")).to_contain_text("reference.wav")
    page.get_by_role("textbox", name="Text", exact=True).fill(TEXT)
    page.get_by_role("button", name="Speak", exact=True).click()
    alert = page.get_by_role("alert")
    expect(alert).to_have_text(re.compile(r"^a reference clip needs its transcript\b"))  # the runtime's line
    assert "\n" not in alert.text_content()
    page.get_by_role("textbox", name="Transcript", exact=True).fill(REF_TEXT)
    page.get_by_role("combobox", name="Language", exact=True).fill("en")
    result = speak(page, **AT_ZERO_FIELDS)
    assert result["request"]["refText"] == REF_TEXT and result["request"]["refAudio"]["sampleRate"] == 24000
    assert result["pieces"] == 1

    expected = python_codes(web_build, tmp_path, "--ref_audio", str(clip), "--ref_text", REF_TEXT, **AT_ZERO)
    share = agreement(page_codes(page), expected)
    assert share >= AGREEMENT, f"a clone: {share:.3f} of cells equal to inference.py's"
    page.get_by_role("button", name="Clear clip", exact=True).click()
    expect(page.get_by_role("status").filter(has_text="Clip:")).to_have_count(0)
    assert opened.errors == []


def test_cloning_from_the_microphone_speaks(visit):
    opened = visit()
    page = opened.page
    loaded(page)
    page.get_by_role("button", name="Record", exact=True).click()
    recording = page.get_by_role("status").filter(has_text=re.compile("^Record"))
    expect(recording).to_have_text(re.compile(r"^Recording [2-9]\.\d s"))  # two seconds of Chromium's fake microphone
    page.get_by_role("button", name="Stop recording", exact=True).click()
    expect(recording).to_have_text(re.compile(r"^Recorded \d+\.\d s \(the microphone\)"))
    page.get_by_role("textbox", name="Transcript", exact=True).fill("Beep, beep.")
    result = speak(page, "Spoken in the recorded voice.", Steps="4")
    assert result["request"]["refText"] == "Beep, beep." and result["request"]["refAudio"]["sampleRate"] == 48000
    assert opened.errors == []


def test_a_second_visit_works_offline_from_the_cache(web_build, browser, tmp_path):
    """The first visit loads the model and keeps the whole build, the codec it has not used yet included; with the
    server gone, the network off and the browser's HTTP cache emptied, the page comes back from the service worker's
    cache, loads the model and speaks."""
    srv = Server(web_build, tmp_path / "voices", tmp_path / "server.log")
    try:
        opened = SiteVisit(browser, srv.url)
        page = opened.page
        loaded(page)
        expect(page.get_by_role("status").filter(has_text="offline")).to_have_text(KEPT)  # the whole build
        opened.context.new_cdp_session(page).send("Network.clearBrowserCache")  # only the service worker's cache left
        page.close()
    finally:
        srv.stop()  # the port answers no more
    try:
        opened.context.set_offline(True)
        opened.errors.clear()
        opened.page = opened.open()
        page = opened.page
        loaded(page)
        assert page.evaluate("navigator.onLine") is False
        speak(page, "Spoken offline.", Steps="4")
        samples, rate = downloaded_wav(page)
        assert rate == 24000 and len(samples) > 0
        expect(page.get_by_role("status").filter(has_text="offline")).to_have_text(KEPT)  # nothing left to fetch
        assert opened.errors == []
    finally:
        opened.close()


class PlainHandler(http.server.SimpleHTTPRequestHandler):
    """A static server without the isolation headers (as many hosts are), with JavaScript's and WebAssembly's types."""

    extensions_map = {**http.server.SimpleHTTPRequestHandler.extensions_map, ".mjs": "text/javascript",
                      ".js": "text/javascript", ".wasm": "application/wasm"}

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def plain_static_server(folder: Path):
    port = free_port()
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", port), functools.partial(PlainHandler, directory=str(folder)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def test_the_page_says_so_when_not_cross_origin_isolated(web_build, browser, tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "web").symlink_to(web_build, target_is_directory=True)  # the same /web/ path, served plainly
    with plain_static_server(site) as url:
        response = httpx.get(f"{url}/web/", timeout=60)
        assert response.status_code == 200 and "cross-origin-embedder-policy" not in response.headers
        opened = SiteVisit(browser, url)
        try:
            page = opened.page
            note = page.get_by_text("not cross-origin isolated")
            expect(note).to_be_visible()
            expect(note).to_contain_text("one thread")
            assert page.evaluate("crossOriginIsolated") is False
            loaded(page)  # on one thread, but it loads
            assert opened.errors == []
        finally:
            opened.close()
