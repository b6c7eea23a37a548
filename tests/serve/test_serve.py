"""serve.py as a user runs it: a real server on loopback with the tiny fp32 build, and the official openai client."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from helpers.scripts import last_error_line, run_script
from helpers.serving import FAST, RATE, TWO_SENTENCES, Server, many_sentences, pcm_samples, speak, started
from helpers.synthesis_inputs import REF_TEXT, reference_clip


@pytest.fixture(scope="module")
def build(served_build):
    return served_build


@pytest.fixture(scope="module")
def server(build, tmp_path_factory):
    yield from started(build, tmp_path_factory, "serve")


def decode(data: bytes, fmt: str) -> np.ndarray:
    """Any response format back to float 24 kHz mono samples (wav and flac read by libsndfile, as a user
    would; a FLAC's header must count exactly the samples it holds)."""
    if fmt == "pcm":
        return pcm_samples(data).astype(np.float32) / 32768
    if fmt in ("wav", "flac"):
        import soundfile

        wav, rate = soundfile.read(io.BytesIO(data), dtype="float32")
        assert rate == RATE
        if fmt == "flac":
            assert soundfile.info(io.BytesIO(data)).frames == len(wav)
        return wav
    import av

    with av.open(io.BytesIO(data)) as container:
        resampler = av.AudioResampler(format="flt", layout="mono", rate=RATE)
        frames = [f for packet in container.decode(audio=0) for f in resampler.resample(packet)]
        frames += resampler.resample(None)
    return np.concatenate([f.to_ndarray().reshape(-1) for f in frames])


def test_speech_in_every_format_plain_and_streamed_decodes_to_the_same_audio(server):
    reference = pcm_samples(speak(server, seed=3))
    assert len(reference) > RATE  # two sentences of speech-length noise
    client = server.client()
    for fmt in ("mp3", "opus", "aac", "flac", "wav", "pcm"):
        plain = client.audio.speech.create(model="tts-1", input=TWO_SENTENCES, voice="alloy", response_format=fmt,
                                           extra_body={**FAST, "seed": 3})
        with client.audio.speech.with_streaming_response.create(
                model="omnivoice", input=TWO_SENTENCES, voice="alloy", response_format=fmt,
                extra_body={**FAST, "seed": 3}) as response:
            assert response.headers["x-accel-buffering"] == "no"
            streamed = b"".join(response.iter_bytes())
        audio = decode(plain.content, fmt)
        if fmt == "opus":  # an Ogg stream's serial number is random; its audio is not
            np.testing.assert_array_equal(decode(streamed, fmt), audio)
        else:  # same seed, same bytes, however it is read
            assert streamed == plain.content, fmt
        if fmt in ("wav", "flac", "pcm"):  # lossless: the very samples
            assert len(audio) == len(reference), fmt
            np.testing.assert_array_equal(np.round(audio * 32768).astype(np.int16), reference, err_msg=fmt)
        else:  # encoder priming and padding add a few frames
            assert abs(len(audio) - len(reference)) < 0.1 * RATE, (fmt, len(audio), len(reference))


def test_sse_sends_base64_deltas_then_done_with_usage(server):
    body = {"model": "omnivoice", "input": TWO_SENTENCES, "voice": "alloy", "response_format": "pcm",
            "stream_format": "sse", "seed": 3, **FAST}
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [json.loads(line[len("data: "):]) for line in response.iter_lines() if line.startswith("data: ")]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert {e["type"] for e in events[:-1]} == {"speech.audio.delta", "speech.audio.timing"} and len(deltas) >= 2
    assert events[-1]["type"] == "speech.audio.done"
    usage = events[-1]["usage"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"] and usage["output_tokens"] > 0
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    assert audio == speak(server, seed=3)


def test_a_design_voice_is_pinned_once_and_sounds_the_same_in_every_request(server):
    first = speak(server, voice="onyx", seed=11)
    assert speak(server, voice="onyx", seed=11) == first
    greedy = {"position_temperature": 0.0, "class_temperature": 0.0}
    assert speak(server, voice="onyx", **greedy) == speak(server, voice="onyx", **greedy)  # no seed needed
    pins = [line for line in server.log_lines() if "pinned voice design 'american accent, male, middle-aged, very low pitch'" in line]
    assert len(pins) == 1


def test_voices_upload_use_delete_and_parity_with_inference(server, build, tmp_path):
    clip = speak(server, text="A short clip to clone from.", voice="coral", fmt="wav", seed=1)
    folder = Path(server.proc.args[server.proc.args.index("--voices_dir") + 1])
    files = {"file": ("clip.wav", clip, "audio/wav")}
    made = httpx.post(f"{server.url}/v1/audio/voices", data={"name": "../../My Voice!", "text": "A short clip."},
                      files=files, timeout=60)
    assert made.status_code == 200, made.text
    vid = made.json()["id"]
    assert vid == "my-voice" and (folder / "my-voice.npz").is_file()  # the name never leaves the folder
    listed = httpx.get(f"{server.url}/v1/audio/voices").json()["voices"]
    assert {"alloy", "my-voice"} <= {v["id"] for v in listed} and all("name" in v for v in listed)

    text, seed = "Cloned speech from the saved voice.", 5
    served = speak(server, text=text, voice=vid, fmt="wav", seed=seed)
    out = tmp_path / "inference.wav"
    run_script("inference.py", "--model_dir", build, "--voice", folder / "my-voice.npz", "--text", text,
               "--seed", seed, "--num_steps", 4, "--output", out, "--quiet", check=True)
    import soundfile

    expected, _ = soundfile.read(out, dtype="int16")
    got, _ = soundfile.read(io.BytesIO(served), dtype="int16")
    np.testing.assert_array_equal(got, expected)

    assert httpx.post(f"{server.url}/v1/audio/voices", data={"name": "junk", "text": "x"},
                      files={"file": ("x.wav", b"not audio at all", "audio/wav")}).status_code == 400
    assert httpx.delete(f"{server.url}/v1/audio/voices/{vid}").json() == {"id": vid, "deleted": True}
    assert not (folder / "my-voice.npz").exists()
    gone = httpx.delete(f"{server.url}/v1/audio/voices/{vid}")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "voice_not_found"
    built_in = httpx.delete(f"{server.url}/v1/audio/voices/alloy")  # VoiceBook.delete's own refusal
    assert built_in.status_code == 400 and built_in.json()["error"]["param"] == "voice"
    assert "built-in voice" in built_in.json()["error"]["message"]
    with pytest.raises(openai.NotFoundError) as caught:
        speak(server, voice=vid)
    assert "known voices: alloy" in caught.value.message


@pytest.fixture(scope="module")
def sharing_server(build, tmp_path_factory):
    """A server whose cost model is pinned to "sharing is free" (--step-cost 1,0): whether first chunks share
    steps is then the engine's rule alone, not what the fit made of this machine's step times, which under a
    loaded CI worker can say a token costs more than a step (tests/runtime/test_engine.py tests the fit)."""
    folder = tmp_path_factory.mktemp("sharing")
    srv = Server(build, folder / "voices", folder / "server.log", "--step-cost", "1,0")
    yield srv
    srv.stop()


def test_concurrent_requests_are_all_correct_and_share_decoding_steps(sharing_server):
    server = sharing_server
    text = "Every client gets its own sentence, decoded together with the others at each step."
    settings = {"num_steps": 24, "duration": 6.0}
    alone = [speak(server, text=text, seed=seed, **settings) for seed in range(8)]
    start = len(server.log_lines())
    with ThreadPoolExecutor(8) as pool:
        together = list(pool.map(lambda seed: speak(server, text=text, seed=seed, **settings), range(8)))
    assert together == alone  # sharing steps changes nothing
    lines = server.request_lines(start)
    assert len(lines) == 8 and all(line["status"] == "ok" for line in lines)
    shared = [int(line["max_batch_shared"]) for line in lines]
    assert sum(s >= 2 for s in shared) >= 2, shared


@pytest.mark.parametrize("value", ["0.05", "-1,0"])
def test_a_bad_step_cost_is_one_line(build, tmp_path, value):
    result = run_script("serve.py", "--model_dir", build, "--voices_dir", tmp_path / "voices", f"--step-cost={value}")
    assert result.returncode != 0 and "--step-cost takes FIXED,PER_TOKEN" in last_error_line(result), result.stderr


def test_a_client_that_disconnects_mid_stream_frees_its_slot(server):
    text = many_sentences(12)
    body = {"model": "omnivoice", "input": text, "voice": "alloy", "response_format": "pcm", "num_steps": 64}
    start = len(server.log_lines())
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", json=body, timeout=60) as response:
        assert response.status_code == 200
        next(response.iter_raw())  # the first sentence's audio, then hang up
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        lines = server.request_lines(start)
        if lines and httpx.get(f"{server.url}/health").json()["outstanding_items"] == 0:
            break
        time.sleep(0.1)
    assert lines and lines[0]["status"] == "disconnected", lines
    assert httpx.get(f"{server.url}/health").json()["outstanding_items"] == 0


@pytest.mark.parametrize("body, param, fragment", [
    ({"input": "", "voice": "alloy"}, "input", "empty"),
    ({"input": "x" * 4097, "voice": "alloy"}, "input", "limit is 4096"),
    ({"input": "Hi.", "voice": "alloy", "response_format": "ogg"}, "response_format", "mp3, opus"),
    ({"input": "Hi.", "voice": "alloy", "speed": 4.5}, "speed", "between 0.25 and 4.0"),
    ({"input": "Hi.", "voice": "alloy", "num_steps": 0}, "num_steps", "between 1"),
    ({"input": "Hi.", "voice": "alloy", "t_shift": -1}, "t_shift", "t_shift must be > 0"),
    ({"input": "Hi.", "voice": "alloy", "num_step": 4}, "num_step", "unknown field"),
    ({"input": "Hi.", "voice": "alloy", "instructions": "purple"}, "instructions", "unsupported instruct items"),
    ({"input": "Hi.", "voice": "alloy", "normalize_text": "yes"}, "normalize_text", "must be true or false, got 'yes'"),
    ({"input": "Hi.", "voice": "alloy", "denoise": 1}, "denoise", "denoise must be true or false"),
    ({"input": "Hi.", "voice": "alloy", "postprocess_output": None, "preprocess_prompt": "no"}, "preprocess_prompt",
     "true or false"),
    ({"input": "Hi.", "ref_audio": 12, "ref_text": "x"}, "ref_audio", "the base64 of an audio file"),
    ({"input": "Hi.", "ref_audio": "not base64 at all!", "ref_text": "x"}, "ref_audio", "is not base64"),
    ({"input": "Hi.", "ref_audio": "AAAA"}, "ref_text", "--include-asr"),
    ({"input": "Hi.", "voice": "alloy", "ref_text": "x"}, "ref_text", "send the clip as ref_audio too"),
    ({"input": "Hi.", "ref_audio": "AAAA", "ref_text": "x" * 1001}, "ref_text", "the limit is 1000"),
    ({"input": "Hi.", "ref_audio": base64.b64encode(b"not audio at all").decode(), "ref_text": "x"}, "ref_audio",
     "cannot read the voice clip"),
    ({"input": "Hi."}, "voice", "voice is required"),
])
def test_bad_requests_get_400_in_openais_envelope(server, body, param, fragment):
    response = httpx.post(f"{server.url}/v1/audio/speech", json={"model": "omnivoice", **body}, timeout=30)
    assert response.status_code == 400
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and fragment in error["message"]


def test_unknown_routes_and_bodies_keep_the_envelope_and_the_server_alive(server):
    assert httpx.get(f"{server.url}/v1/nothing").json()["error"]["code"] == "not_found"
    bad = httpx.post(f"{server.url}/v1/audio/speech", content=b"{not json", headers={"content-type": "application/json"})
    assert bad.status_code == 400 and "JSON" in bad.json()["error"]["message"]
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    assert {m.id for m in server.client().models.list()} >= {"omnivoice", "tts-1"}


def test_key_queue_and_timeout_limits(build, tmp_path):
    """401 without the key (from OMNIVOICE_API_KEY), 429 when the queue is full, 504 past the timeout."""
    srv = Server(build, tmp_path / "voices", tmp_path / "server.log", "--max-queue", "1", "--request-timeout", "3",
                 env={"OMNIVOICE_API_KEY": "sesame"})
    try:
        with pytest.raises(openai.AuthenticationError) as caught:
            srv.client("wrong").models.list()
        assert caught.value.status_code == 401 and caught.value.body["code"] == "invalid_api_key"
        assert httpx.get(f"{srv.url}/health").status_code == 200  # health needs no key
        client = srv.client("sesame")
        assert client.models.list().data
        speak_fast = client.audio.speech.create(model="omnivoice", input="Hi.", voice="alloy", response_format="pcm",
                                                extra_body=FAST)
        assert len(speak_fast.content) > 0  # pins alloy, so the slow requests below are the item itself

        slow = {"num_steps": 128, "duration": 28.0}  # about 9 s on the tiny build
        results = {}
        holder = threading.Thread(target=lambda: results.setdefault("slow", _expect_error(
            lambda: client.audio.speech.create(model="omnivoice", input="A long and slow sentence.", voice="alloy",
                                               response_format="pcm", extra_body=slow))))
        holder.start()
        deadline = time.monotonic() + 10
        while httpx.get(f"{srv.url}/health").json()["outstanding_items"] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        with pytest.raises(openai.RateLimitError) as busy:
            client.audio.speech.create(model="omnivoice", input="Hi.", voice="alloy", extra_body=FAST)
        assert busy.value.status_code == 429 and busy.value.body["code"] == "rate_limit_exceeded"
        holder.join(timeout=30)
        assert results["slow"].status_code == 504 and results["slow"].body["code"] == "timeout"
        deadline = time.monotonic() + 10
        while httpx.get(f"{srv.url}/health").json()["outstanding_items"] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert httpx.get(f"{srv.url}/health").json()["outstanding_items"] == 0  # the timed-out item was dropped
    finally:
        srv.stop()


def _expect_error(call):
    try:
        call()
    except openai.APIStatusError as exc:
        return exc
    raise AssertionError("the request succeeded")


# --- upstream's generate() options: normalize_text, its switches, a one-off clone -------------------

GREEDY = {"seed": 7, "position_temperature": 0.0}  # the same text gives the same bytes
APPLES = "I have 25 apples."


def wav_bytes(rate: int = RATE) -> bytes:
    """The test reference clip (4 s, silence around two phrases) as a WAV file at `rate`."""
    import soundfile
    from scipy.signal import resample_poly

    clip = reference_clip()[:, 0]
    buffer = io.BytesIO()
    soundfile.write(buffer, clip if rate == RATE else resample_poly(clip, rate, RATE), rate, format="WAV")
    return buffer.getvalue()


def one_off(**extra) -> dict:
    return {"ref_audio": base64.b64encode(wav_bytes()).decode("ascii"), "ref_text": REF_TEXT, **extra}


def test_normalize_text_speaks_what_the_normalizer_writes(server):
    from codes.runtime.text.normalize import normalize_text

    words = normalize_text(APPLES, "en")
    assert "25" not in words and "twenty" in words
    normalized = speak(server, text=APPLES, language="en", normalize_text=True, **GREEDY)
    assert normalized == speak(server, text=words, language="en", **GREEDY)
    assert normalized != speak(server, text=APPLES, language="en", **GREEDY)  # off unless asked (no --normalize-text)


def test_the_switches_reach_the_settings(server):
    start = len(server.log_lines())
    switches = {"denoise": False, "preprocess_prompt": False, "postprocess_output": False}
    assert len(speak(server, text="Hi there.", normalize_text=True, **switches)) > 0
    (line,) = server.request_lines(start)
    assert json.loads(line["options"]) == {**FAST, **switches, "normalize_text": True}
    cloned = speak(server, text="Hi there.", **one_off(**GREEDY))
    assert cloned != speak(server, text="Hi there.", **one_off(denoise=False, **GREEDY))  # the prompt lost a token
    assert cloned != speak(server, text="Hi there.", **one_off(preprocess_prompt=False, **GREEDY))  # silence kept


def test_a_one_off_clone_speaks_as_its_saved_voice_would_and_saves_nothing(server):
    folder = server.voices_dir
    files_before = sorted(path.relative_to(folder) for path in folder.rglob("*"))
    voices_before = httpx.get(f"{server.url}/v1/audio/voices").json()
    text = "Cloned once, kept nowhere."
    body = {"model": "omnivoice", "input": text, "response_format": "pcm", **FAST, **GREEDY, **one_off()}
    without_voice = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)  # voice may be left out
    assert without_voice.status_code == 200, without_voice.text
    once = without_voice.content
    assert speak(server, text=text, voice="onyx", **one_off(**GREEDY)) == once  # the clip wins over a voice
    assert sorted(path.relative_to(folder) for path in folder.rglob("*")) == files_before
    assert httpx.get(f"{server.url}/v1/audio/voices").json() == voices_before

    made = httpx.post(f"{server.url}/v1/audio/voices", data={"name": "one-off-twin", "text": REF_TEXT},
                      files={"file": ("clip.wav", wav_bytes(), "audio/wav")}, timeout=60)
    assert made.status_code == 200, made.text
    try:
        assert speak(server, text=text, voice="one-off-twin", **GREEDY) == once  # encoded as an upload is
    finally:
        httpx.delete(f"{server.url}/v1/audio/voices/one-off-twin")


@pytest.fixture(scope="module")
def normalizing(build, tmp_path_factory):
    """A server that normalizes by default, with small clip limits."""
    folder = tmp_path_factory.mktemp("normalizing")
    srv = Server(build, folder / "voices", folder / "server.log", "--normalize-text", "--max-upload-bytes", "100000",
                 "--max-upload-seconds", "2")
    yield srv
    srv.stop()


def test_normalize_text_by_default_and_a_request_that_says_no(normalizing):
    from codes.runtime.text.normalize import normalize_text

    defaults = httpx.get(f"{normalizing.url}/v1/audio/defaults").json()
    assert defaults["normalize_text"] is True and defaults["num_steps"] == 32 and defaults["denoise"] is True
    words = normalize_text(APPLES, "en")
    spoken = speak(normalizing, text=APPLES, language="en", **GREEDY)
    assert spoken == speak(normalizing, text=words, language="en", **GREEDY)
    assert speak(normalizing, text=APPLES, language="en", normalize_text=False, **GREEDY) != spoken


def test_a_one_off_clip_is_held_to_the_upload_limits(normalizing):
    def post(**fields):
        body = {"model": "omnivoice", "input": "Hi.", "voice": "alloy", "response_format": "pcm", **FAST, **fields}
        return httpx.post(f"{normalizing.url}/v1/audio/speech", json=body, timeout=60)

    large = wav_bytes()
    assert len(large) > 100000
    too_large = post(ref_audio=base64.b64encode(large).decode(), ref_text=REF_TEXT)
    assert too_large.status_code == 413, too_large.text
    error = too_large.json()["error"]
    assert (error["param"], error["code"]) == ("ref_audio", "clip_too_large") and "--max-upload-bytes" in error["message"]
    small = wav_bytes(8000)  # 4 s in under 100000 bytes: refused by its length
    assert len(small) < 100000
    too_long = post(ref_audio=base64.b64encode(small).decode(), ref_text=REF_TEXT)
    assert too_long.status_code == 400 and too_long.json()["error"]["code"] == "clip_too_long"
    assert "--max-upload-seconds" in too_long.json()["error"]["message"]
    body = post(input="x" * (1 << 20) + "x" * 140000)  # past --max-body-bytes and a clip's base64 together
    assert body.status_code == 413 and body.json()["error"]["code"] == "body_too_large"
    assert httpx.get(f"{normalizing.url}/health").json()["requests_in_flight"] == 0


def test_the_languages_route_lists_every_language_by_upstreams_names(server):
    from codes.runtime.text.voice_design import LANGUAGE_NAME_TO_ID

    listed = httpx.get(f"{server.url}/v1/audio/languages").json()["languages"]
    assert len(listed) == len(LANGUAGE_NAME_TO_ID) == 646
    names = [language["name"] for language in listed]
    assert names == sorted(names) and {"id": "yue", "name": "Cantonese"} in listed
    assert {"id": "ja", "name": "Japanese"} in listed and {"id": "zh", "name": "Chinese"} in listed
    assert {language["id"] for language in listed} == set(LANGUAGE_NAME_TO_ID.values())


def test_the_voice_design_route_serves_upstreams_vocabulary(server):
    from codes.runtime.data import load_table
    from codes.runtime.text.voice_design import resolve_instruct

    listed = httpx.get(f"{server.url}/v1/audio/voice-design").json()["categories"]
    table = load_table("instruct")["categories"]
    assert [category["name"] for category in listed] == [category["name"] for category in table]
    for category, source in zip(listed, table):
        values = [item["value"] for item in category["items"]]
        assert values == list(source.get("en_to_zh", source.get("items", [])))
        assert all(resolve_instruct(value) for value in values)  # every item is one the runtime takes
        if "en_to_zh" in source:
            assert {item["value"]: item["zh"] for item in category["items"]} == source["en_to_zh"]
    named = {category["name"]: category for category in listed}
    assert all(item.get("label") for item in named["dialect"]["items"])  # every dialect has its English name
    assert named["accent"]["excludes"] == ["dialect"] and all(category["label"] for category in listed)


def test_chosen_design_items_are_joined_as_the_runtime_reads_them(server):
    from codes.runtime.text.voice_design import resolve_instruct

    def joined(items):
        return httpx.post(f"{server.url}/v1/audio/voice-design", json={"items": items})

    assert joined(["female", "low pitch", "british accent"]).json() == {"instructions": "female, low pitch, british accent"}
    assert joined(["female", "low pitch", "四川话"]).json()["instructions"] == resolve_instruct("female, low pitch, 四川话")
    assert joined(["female", "low pitch", "四川话"]).json()["instructions"] == "女，低音调，四川话"
    assert joined([]).json() == {"instructions": ""}
    for bad, message in ((["male", "female"], "conflicting instruct items"), (["loud"], "loud"),
                         ({"items": "male"}, "items")):
        answer = joined(bad) if isinstance(bad, list) else httpx.post(f"{server.url}/v1/audio/voice-design", json=bad)
        assert answer.status_code == 400 and message in answer.json()["error"]["message"]


def test_normalize_text_without_its_library_fails_at_start_in_one_line(build, tmp_path):
    shadow = tmp_path / "shadow" / "tn"  # WeTextProcessing's package, as a machine without pynini imports it
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError(\"No module named 'pynini'\")\n")
    result = run_script("serve.py", "--model_dir", build, "--voices_dir", tmp_path / "voices", "--normalize-text",
                        env={"PYTHONPATH": str(shadow.parent)})
    assert result.returncode == 2 and "ready:" not in result.stdout
    line = last_error_line(result)
    assert "text normalization needs WeTextProcessing" in line and "pip install -r requirements-runtime.txt" in line
    assert "--normalize-text" in run_script("serve.py", "--help").stdout


def test_a_clip_without_its_transcript_is_refused_in_one_line_where_the_build_has_no_recogniser(server):
    """This build has no recogniser (tests/serve/test_transcribed_uploads.py tries one that has)."""
    assert httpx.get(f"{server.url}/v1/audio/defaults").json()["transcribes_clips"] is False
    folder = server.voices_dir
    files_before = sorted(path.relative_to(folder) for path in folder.rglob("*"))
    upload = httpx.post(f"{server.url}/v1/audio/voices", data={"name": "unheard"},
                        files={"file": ("clip.wav", wav_bytes(), "audio/wav")}, timeout=60)
    body = {"model": "omnivoice", "input": "Hi.", "response_format": "pcm", **FAST,
            "ref_audio": base64.b64encode(wav_bytes()).decode("ascii")}
    one_off_clip = httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=60)
    for refused, param in ((upload, "text"), (one_off_clip, "ref_text")):
        assert refused.status_code == 400, refused.text
        error = refused.json()["error"]
        assert (error["param"], error["code"]) == (param, "no_recogniser") and "\n" not in error["message"]
        assert "unless the build has a recogniser" in error["message"] and "--include-asr" in error["message"]
    assert sorted(path.relative_to(folder) for path in folder.rglob("*")) == files_before
    assert httpx.get(f"{server.url}/health").json()["requests_in_flight"] == 0
