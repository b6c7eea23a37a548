"""A speech request's one lifecycle (codes/serve/core/lifecycle.py), in-process on the real tiny engine:
every way a request can end writes one log line with its status, cancels what it left, and frees
its slot, whichever door it came from; admission is one count and one rule for all of them. No
process boundary is under test here; the doors' own tests (test_doors, test_hostile,
test_wyoming_hostile) run them over real sockets."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest

import serve
from codes.serve.core.lifecycle import SpeechRequest
from codes.serve.core.params import parse_speech
from codes.serve.edge.errors import RequestError
from codes.serve.launch.startup import load_model, service_options, service_state

MAX_CONCURRENT = 2
LONG = " ".join(f"This is sentence number {i}, spoken slowly." for i in range(12))


@pytest.fixture(scope="module")
def state(served_build, tmp_path_factory):
    folder = tmp_path_factory.mktemp("lifecycle")
    options = service_options(serve.parse_args(["--model_dir", str(served_build), "--voices_dir", str(folder),
                                                "--num-steps", "4", "--max-concurrent", str(MAX_CONCURRENT),
                                                "--threads", "1"]))
    shared = service_state(options)
    shared.model = load_model(options, shared.voices)
    yield shared
    shared.model.stop()


@pytest.fixture
def lines(caplog):
    caplog.set_level(logging.INFO, logger="omnivoice.serve")

    def request_lines() -> list[dict]:
        return [{**dict(re.findall(r"(\w+)=(\S+)", r.getMessage())), "line": r.getMessage()} for r in caplog.records
                if r.getMessage().startswith("speech request=")]  # `line`: a reason is quoted JSON, with spaces

    return request_lines


def params(state, text: str | None = "Hello there.", **fields):
    body = {"voice": "alloy", **fields}
    if text is not None:
        body["input"] = text
    return parse_speech(body, state.config.limits, state.config.settings, streamed_text=text is None)


def idle(state) -> bool:
    return state.in_flight == 0 and not state.model.outstanding


async def until(condition, seconds: float = 60) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition():
        assert asyncio.get_running_loop().time() < deadline, "condition not met in time"
        await asyncio.sleep(0.01)


def test_a_request_spoken_to_its_end_logs_ok_and_frees_its_slot(state, lines):
    async def speak():
        async with SpeechRequest(state, params(state), "mcp") as speaking:
            assert state.in_flight == 1
            return [wav async for wav in speaking.pieces()]

    pieces = asyncio.run(speak())
    assert pieces and idle(state)
    (line,) = lines()
    assert line["status"] == "ok" and line["door"] == "mcp"


def test_admission_is_one_count_for_every_door(state, lines):
    """Two held (one per door), the third from any door is a 429 before any work, and is not logged."""
    async def hold():
        first = SpeechRequest(state, params(state, LONG), "http")
        second = SpeechRequest(state, params(state, LONG), "wyoming")
        async with first, second:
            assert state.in_flight == MAX_CONCURRENT
            for door in ("http", "wyoming", "mcp"):
                with pytest.raises(RequestError) as refused:
                    async with SpeechRequest(state, params(state), door):
                        pass
                assert refused.value.status == 429 and refused.value.code == "rate_limit_exceeded"

    asyncio.run(hold())
    asyncio.run(until_idle(state))
    assert [line["status"] for line in lines()] == ["disconnected", "disconnected"]  # left before their audio


async def until_idle(state) -> None:
    await until(lambda: idle(state))


def test_a_refusal_while_opening_is_logged_and_releases(state, lines):
    async def unknown():
        async with SpeechRequest(state, params(state, voice="nobody-here"), "http"):
            pass

    with pytest.raises(RequestError) as refused:
        asyncio.run(unknown())
    assert refused.value.status == 404 and idle(state)
    (line,) = lines()
    assert line["status"] == "error" and "unknown voice 'nobody-here'" in line["line"]


def test_a_door_that_raises_mid_stream_has_its_items_cancelled_and_the_error_logged(state, lines):
    class EncoderBroke(Exception):
        pass

    async def broken():
        async with SpeechRequest(state, params(state, LONG), "http") as speaking:
            async for _ in speaking.pieces():
                raise EncoderBroke("the encoder failed")

    with pytest.raises(EncoderBroke):
        asyncio.run(broken())
    asyncio.run(until_idle(state))
    (line,) = lines()
    assert line["status"] == "error" and int(line["sentences"]) > 1


def test_a_cancelled_task_is_disconnected_and_a_door_ended_request_keeps_its_word(state, lines):
    async def cancelled():
        got_first = asyncio.Event()

        async def speak():
            async with SpeechRequest(state, params(state, LONG), "wyoming") as speaking:
                async for _ in speaking.pieces():
                    got_first.set()

        task = asyncio.create_task(speak())
        await got_first.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    async def timed_out():
        async with SpeechRequest(state, params(state, LONG), "http") as speaking:
            speaking.end("timeout")
            assert [wav async for wav in speaking.pieces()] == []

    asyncio.run(cancelled())
    asyncio.run(timed_out())
    asyncio.run(until_idle(state))
    assert [line["status"] for line in lines()] == ["disconnected", "timeout"]


def test_a_stream_holds_a_slot_only_while_it_has_text_to_speak(state, lines):
    async def stream():
        async with SpeechRequest(state, params(state, None), "wyoming", streamed_text=True) as speaking:
            assert state.in_flight == 0  # opened, no text yet
            await speaking.push("Hello there, how are you today? ")
            assert state.in_flight == 1
            pieces, heard = speaking.pieces(), 0
            while heard < len(speaking.job.requests):  # the first sentence may come as clauses
                await pieces.__anext__()
                heard += 1
            waiting = asyncio.ensure_future(pieces.__anext__())  # every sentence so far spoken: it waits
            await until(lambda: state.in_flight == 0)
            await speaking.push("Goodbye.")
            await speaking.close()
            assert state.in_flight == 1
            rest = [await waiting] + [wav async for wav in pieces]
            return rest

    assert asyncio.run(stream())
    assert idle(state)
    (line,) = lines()
    assert line["status"] == "ok" and int(line["sentences"]) >= 2


def test_a_stream_closed_with_nothing_said_is_refused_for_every_door(state, lines):
    async def empty():
        async with SpeechRequest(state, params(state, None), "wyoming", streamed_text=True) as speaking:
            await speaking.push("   ")
            await speaking.close()
            async for _ in speaking.pieces():
                pass

    with pytest.raises(RequestError) as refused:
        asyncio.run(empty())
    assert refused.value.code == "empty_text" and idle(state)
    assert [line["status"] for line in lines()] == ["error"]


def test_streamed_text_is_normalized_sentence_by_sentence_as_it_comes(state, lines):
    async def spoken(normalize: bool) -> list[str]:
        async with SpeechRequest(state, params(state, None, normalize_text=normalize, language="English"), "wyoming",
                            streamed_text=True) as speaking:
            await speaking.push("I have 25 apples. And")
            first = [request.text for request in speaking.job.requests]  # the first sentence is out: normalized
            await speaking.push(" 3 pears.")
            await speaking.close()
            async for _ in speaking.pieces():
                pass
            return first, [request.text for request in speaking.job.requests]

    first, normalized = asyncio.run(spoken(True))
    assert first and "25" not in " ".join(first) and "twenty" in " ".join(first)
    assert not any(digit in " ".join(normalized) for digit in "0123456789") and "three pears" in " ".join(normalized)
    _, plain = asyncio.run(spoken(False))
    assert "25" in " ".join(plain) and "3 pears" in " ".join(plain)
    assert [line["status"] for line in lines()] == ["ok", "ok"] and idle(state)


def test_an_item_the_engine_dropped_mid_step_ends_the_request_as_gone_not_as_an_error():
    """The engine resolves a running item it drops with concurrent.futures.CancelledError, an Exception
    unlike asyncio's; reaching a request's end, it means the request was going (a client that left,
    a server shutting down), and the log line says so (a fresh-clone run logged it as "error")."""
    import concurrent.futures
    from types import SimpleNamespace

    state = SimpleNamespace(draining=False)
    speaking = SpeechRequest(state, None, "wyoming")
    assert speaking._outcome(concurrent.futures.CancelledError()) == ("disconnected", None)
    state.draining = True
    assert speaking._outcome(concurrent.futures.CancelledError()) == ("shutdown", None)
    assert speaking._outcome(RuntimeError("a real failure"))[0] == "error"
