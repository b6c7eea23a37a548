"""First audio without a cold start: design voices pinned once, kept on disk, preloaded before /health
turns 200, and pinned again only when what makes a pin changes (a real server on the tiny build)."""

from __future__ import annotations

import json
import threading
import time

import httpx
import numpy as np
import pytest

from helpers.serving import Server, free_port, speak
from codes.runtime.request import Voice
from codes.runtime.text.duration import paced_frames
from codes.runtime.voices.reference import trim_voice
from codes.serve.voices.pins import PinSettings, canonical_instruct


def pinned_lines(srv: Server, start: int = 0) -> list[str]:
    return [line for line in srv.log_lines(start) if "pinned voice design" in line and "loaded" not in line]


@pytest.fixture(scope="module")
def build(served_build):
    return served_build


@pytest.fixture(scope="module")
def voices_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("latency") / "voices"


@pytest.fixture(scope="module")
def preloaded(build, voices_dir):
    """A server that pinned alloy and onyx at startup, and the first request it answered with each."""
    srv = Server(build, voices_dir, voices_dir.parent / "first.log", "--preload-voices", "alloy,onyx")
    try:
        first = {name: speak(srv, voice=name, seed=5) for name in ("alloy", "onyx")}
        yield srv, first
    finally:
        srv.stop()


def test_preloaded_voices_are_pinned_before_the_server_is_ready_and_kept_on_disk(preloaded, voices_dir):
    srv, _ = preloaded
    assert "design voices pinned: 2 synthesized, 0 from" in srv.ready_line
    pins = sorted((voices_dir / "pinned").glob("*.npz"))
    assert len(pins) == 2 and all(p.with_suffix(".json").is_file() for p in pins)
    described = [json.loads(p.with_suffix(".json").read_text()) for p in pins]
    assert {d["seconds"] for d in described} == {PinSettings().seconds}
    assert all(Voice.load(p).codes.shape[1] == paced_frames(PinSettings().text) for p in pins)
    assert len(pinned_lines(srv)) == 2  # the requests pinned nothing more
    listed = {v["id"] for v in httpx.get(f"{srv.url}/v1/audio/voices").json()["voices"]}
    assert not any(name.startswith(("american", "female", "male")) for name in listed)  # pins are not saved voices


def test_a_restart_pins_nothing_and_speaks_the_same_voice(preloaded, build, voices_dir):
    _, first = preloaded
    srv = Server(build, voices_dir, voices_dir.parent / "restart.log", "--preload-voices", "alloy,onyx")
    try:
        assert "design voices pinned: 0 synthesized, 2 from" in srv.ready_line
        assert speak(srv, voice="onyx", seed=5) == first["onyx"] and speak(srv, voice="alloy", seed=5) == first["alloy"]
        # the same design in another order is the same pinned voice
        reordered = ", ".join(reversed(canonical_instruct("female, young adult, moderate pitch, american accent").split(", ")))
        speak(srv, voice="alloy", instructions=reordered)
        assert pinned_lines(srv) == []
    finally:
        srv.stop()


def test_other_pin_settings_make_a_new_pin_and_leave_the_old_ones(preloaded, build, voices_dir):
    before = {p: p.stat().st_mtime_ns for p in (voices_dir / "pinned").iterdir()}
    srv = Server(build, voices_dir, voices_dir.parent / "longer.log", "--pin-seconds", "3")
    try:
        assert "0 synthesized, 0 from" in srv.ready_line  # nothing preloaded
        speak(srv, voice="onyx", seed=5)
        lines = pinned_lines(srv)
        assert len(lines) == 1 and f"({paced_frames(PinSettings(seconds=3).text)} frames" in lines[0]
    finally:
        srv.stop()
    after = {p: p.stat().st_mtime_ns for p in (voices_dir / "pinned").iterdir()}
    assert all(after[p] == mtime for p, mtime in before.items()) and len(after) == len(before) + 2


def test_health_is_503_until_the_preloaded_voices_are_pinned(build, tmp_path):
    voices = tmp_path / "voices"
    seen: list[tuple[int, int]] = []  # (status, pins on disk) at each poll
    stop = threading.Event()

    def poll():
        while not stop.is_set():
            try:
                status = httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code
            except httpx.HTTPError:
                status = 0
            seen.append((status, len(list((voices / "pinned").glob("*.npz")))))
            time.sleep(0.01)

    port = free_port()
    poller = threading.Thread(target=poll)
    poller.start()
    try:
        srv = Server(build, voices, tmp_path / "server.log", "--preload-voices", "all", port=port)
        deadline = time.monotonic() + 30
        while not any(status == 200 for status, _ in seen) and time.monotonic() < deadline:
            time.sleep(0.05)
        srv.stop()
    finally:
        stop.set()
        poller.join()
    ok = [pins for status, pins in seen if status == 200]
    assert ok and min(ok) == 13  # the first 200 came with every design voice pinned
    assert any(status == 503 for status, _ in seen)  # it answered, loading, before


def test_an_unknown_preload_voice_is_refused_in_one_line(build, tmp_path):
    from helpers.scripts import last_error_line, run_script

    result = run_script("serve.py", "--model_dir", build, "--voices_dir", tmp_path, "--preload-voices", "alloy,nobody")
    assert result.returncode != 0
    assert last_error_line(result) == ("error: --preload-voices: unknown design voice(s) nobody; use all or some of "
                                       "alloy, ash, ballad, coral, echo, fable, nova, onyx, sage, shimmer, verse, "
                                       "marin, cedar")


def test_trim_voice_cuts_the_transcript_at_a_clause_and_the_codes_in_proportion():
    codes = np.arange(8 * 200).reshape(8, 200) % 1024
    voice = Voice(codes, "The first part of the clip, then a second part that runs on for a while longer.", 0.1)
    trimmed = trim_voice(voice, 4.0)  # 100 of 200 frames
    assert trimmed.text == "The first part of the clip,"
    assert 0 < trimmed.codes.shape[1] <= 100 and trimmed.rms == 0.1
    np.testing.assert_array_equal(trimmed.codes, codes[:, :trimmed.codes.shape[1]])
    assert trim_voice(voice, 8.0) is voice  # short enough: used as given
    words = trim_voice(Voice(codes, "one two three four five six seven eight nine ten", None), 2.0)
    assert words.text == "one two" and words.codes.shape[1] <= 50  # "one two three" is past a quarter of the weight


def test_a_saved_voice_is_trimmed_only_when_asked(build, tmp_path):
    voices = tmp_path / "voices"
    voices.mkdir()
    codes = np.random.default_rng(0).integers(0, 1024, (8, 150))
    Voice(codes, "A long reference, spoken for six seconds or so, with a few clauses in it.", 0.1).save(
        voices / "long.npz")
    plain = Server(build, voices, tmp_path / "plain.log")
    try:
        as_given = speak(plain, text="Hello.", voice="long", seed=1)
    finally:
        plain.stop()
    trimmed = Server(build, voices, tmp_path / "trimmed.log", "--max-ref-seconds", "2")
    try:
        shorter = speak(trimmed, text="Hello.", voice="long", seed=1)
        assert speak(trimmed, text="Hello.", voice="long", seed=1) == shorter
    finally:
        trimmed.stop()
    assert shorter != as_given
    assert Voice.load(voices / "long.npz").codes.shape[1] == 150  # the file is left as it is
