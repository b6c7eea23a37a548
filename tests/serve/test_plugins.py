"""The agent frameworks' plugins (integrations/livekit, integrations/pipecat), each with its framework's real
classes against a real serve.py on loopback (tiny build): LiveKit's SynthesizeStream fed word by word speaks
before end_input, with an aligned transcript, and an interruption cancels on the server; Pipecat's service in a
pipeline gives TTS frames with word timestamps, and an interruption stops its audio."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import httpx
import pytest
from livekit.agents.types import USERDATA_TIMED_TRANSCRIPT
from livekit.plugins import omnivoice
from pipecat.frames.frames import (
    EndFrame,
    Frame,
    InterruptionFrame,
    LLMFullResponseEndFrame,
    LLMFullResponseStartFrame,
    LLMTextFrame,
    TTSAudioRawFrame,
    TTSStartedFrame,
    TTSStoppedFrame,
    TTSTextFrame,
)
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
from pipecat.workers.runner import WorkerRunner
from pipecat_omnivoice import OmniVoiceTTSService

from helpers.serving import RATE, Server, started
from helpers.synthesis_inputs import ASR_BUILD

KEY = "plugin-key"
REPLY = "Sure, I turned on the kitchen lights. The living room stays dark, as you asked. Anything else?"
LONG = " ".join(f"This is sentence number {i}, and it goes on for a while." for i in range(30))
WAIT = 120  # seconds a test waits for an event before it fails


@pytest.fixture(scope="module")
def server(served_build, tmp_path_factory):
    yield from started(served_build, tmp_path_factory, "plugins", "--api-key", KEY, "--num-steps", "4")


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, WAIT))


def ws_lines(srv: Server, start: int, count: int) -> list[dict]:
    return srv.door_lines("ws", start, count, WAIT, "no stream request line in the log")


def idle(srv: Server) -> bool:
    health = httpx.get(f"{srv.url}/health", timeout=WAIT).json()
    return health["requests_in_flight"] == 0 and health["outstanding_items"] == 0


def wait_idle(srv: Server) -> None:
    deadline = time.monotonic() + WAIT
    while not idle(srv):
        assert time.monotonic() < deadline, "the server stayed busy"
        time.sleep(0.02)


# --- LiveKit Agents --------------------------------------------------------------------------------

def livekit_tts(srv: Server, session: aiohttp.ClientSession) -> omnivoice.TTS:
    return omnivoice.TTS(base_url=srv.url, api_key=KEY, voice="alloy", num_steps=4, seed=5, http_session=session)


def test_livekit_stream_fed_word_by_word_speaks_before_end_input_with_an_aligned_transcript(server):
    async def speak():
        async with aiohttp.ClientSession() as session:
            voice = livekit_tts(server, session)
            assert voice.capabilities.streaming and voice.capabilities.aligned_transcript
            words = REPLY.split(" ")
            async with voice.stream() as stream:
                for word in words[:4]:  # "Sure, I turned on": the first clause is complete
                    stream.push_text(word + " ")
                first = await stream.__anext__()  # audio before end_input
                for word in words[4:]:
                    stream.push_text(word + " ")
                stream.end_input()
                return [first] + [event async for event in stream]

    events = run(speak())
    frames = [event.frame for event in events]
    assert all(frame.sample_rate == RATE and frame.num_channels == 1 for frame in frames)
    samples = sum(frame.samples_per_channel for frame in frames)
    timed = [text for frame in frames for text in frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]
    assert " ".join(text.strip() for text in timed) == REPLY and timed[0].strip() == "Sure,"
    assert timed[0].start_time == 0 and all(a.end_time == b.start_time for a, b in zip(timed, timed[1:]))
    assert all(text.end_time > text.start_time for text in timed) and timed[-1].end_time == samples / RATE


def test_livekit_synthesize_speaks_a_whole_text(server):
    async def whole():
        async with aiohttp.ClientSession() as session:
            async with livekit_tts(server, session).synthesize("Hello there, how are you?") as chunked:
                return await chunked.collect()

    frame = run(whole())
    assert frame.sample_rate == RATE and frame.duration > 0.1


def test_livekit_interruption_cancels_on_the_server(server):
    start = len(server.log_lines())

    async def interrupted():
        async with aiohttp.ClientSession() as session:
            stream = livekit_tts(server, session).stream()
            stream.push_text(LONG)
            await stream.__anext__()  # speaking
            await stream.aclose()  # what an agent does to its speech when the user talks over it

    run(interrupted())
    first, *after = ws_lines(server, start, 1)
    assert first["status"] == "cancelled", server.log_lines(start)
    # after a cancel the connection opens a fresh utterance; the plugin's close may end it before any text came
    assert all(line["status"] == "disconnected" and line["chars"] == "0" for line in after), after
    wait_idle(server)


# --- Pipecat -----------------------------------------------------------------------------------------

class Recorder(FrameProcessor):
    """The pipeline's end: every frame that comes down, in order, and an event per frame type seen."""

    def __init__(self):
        super().__init__()
        self.frames: list[Frame] = []
        self.seen: dict[type, asyncio.Event] = {}

    def event(self, kind: type) -> asyncio.Event:
        return self.seen.setdefault(kind, asyncio.Event())

    async def process_frame(self, frame: Frame, direction: FrameDirection):
        await super().process_frame(frame, direction)
        if direction == FrameDirection.DOWNSTREAM:
            self.frames.append(frame)
            self.event(type(frame)).set()
        await self.push_frame(frame, direction)


async def in_pipeline(srv: Server, script, **options) -> list[Frame]:
    """Run the service in a pipeline; `script(worker, recorder)` drives it; every frame that came out."""
    service = OmniVoiceTTSService(base_url=srv.url, api_key=KEY, voice="alloy", num_steps=4, seed=5, **options)
    recorder = Recorder()
    worker = PipelineWorker(Pipeline([service, recorder]), params=PipelineParams(audio_out_sample_rate=RATE),
                            cancel_on_idle_timeout=False)
    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)

    async def drive():
        await script(worker, recorder)
        await worker.queue_frame(EndFrame())

    await asyncio.gather(runner.run(), drive())
    return recorder.frames


def test_pipecat_speaks_a_reply_with_word_timestamps(server):
    async def reply(worker, recorder):
        await worker.queue_frame(LLMFullResponseStartFrame())
        for word in REPLY.split(" "):
            await worker.queue_frame(LLMTextFrame(word + " "))
        await worker.queue_frame(LLMFullResponseEndFrame())
        await recorder.event(TTSStoppedFrame).wait()

    frames = run(in_pipeline(server, reply))
    kinds = [type(frame) for frame in frames]
    assert TTSStartedFrame in kinds and kinds.index(TTSStartedFrame) < kinds.index(TTSAudioRawFrame)
    audio = [frame for frame in frames if isinstance(frame, TTSAudioRawFrame)]
    assert all(frame.sample_rate == RATE for frame in audio) and sum(len(frame.audio) for frame in audio) > RATE
    words = [frame for frame in frames if isinstance(frame, TTSTextFrame)]
    assert " ".join(frame.text.strip() for frame in words) == REPLY
    stamps = [frame.pts for frame in words]
    assert all(a < b for a, b in zip(stamps, stamps[1:]))  # timed piece by piece, in order


@pytest.fixture(scope="module")
def aligning(builds, tmp_path_factory):
    """A server whose build's recogniser times words."""
    folder = tmp_path_factory.mktemp("aligning")
    srv = Server(builds.get(*ASR_BUILD), folder / "voices", folder / "server.log", "--api-key", KEY,
                 "--num-steps", "4")
    yield srv
    srv.stop()


def test_livekit_word_timings_give_the_transcript_word_by_word(aligning):
    async def speak():
        async with aiohttp.ClientSession() as session:
            voice = omnivoice.TTS(base_url=aligning.url, api_key=KEY, voice="alloy", num_steps=4, seed=5,
                                  language="en", word_timings=True, http_session=session)
            async with voice.stream() as stream:
                stream.push_text(REPLY)
                stream.end_input()
                return [event async for event in stream]

    frames = [event.frame for event in run(speak())]
    timed = [text for frame in frames for text in frame.userdata.get(USERDATA_TIMED_TRANSCRIPT, [])]
    assert [text.strip() for text in timed] == REPLY.split()  # one TimedString a word, punctuation on its word
    assert all(text.end_time >= text.start_time for text in timed)
    assert all(a.start_time <= b.start_time for a, b in zip(timed, timed[1:]))
    assert timed[-1].end_time <= sum(frame.samples_per_channel for frame in frames) / RATE


def test_pipecat_word_timings_give_each_word_its_own_timestamp(aligning):
    async def reply(worker, recorder):
        await worker.queue_frame(LLMFullResponseStartFrame())
        await worker.queue_frame(LLMTextFrame(REPLY))
        await worker.queue_frame(LLMFullResponseEndFrame())
        await recorder.event(TTSStoppedFrame).wait()

    frames = run(in_pipeline(aligning, reply, language="en", word_timings=True))
    words = [frame for frame in frames if isinstance(frame, TTSTextFrame)]
    assert [frame.text.strip() for frame in words] == REPLY.split()
    stamps = [frame.pts for frame in words]
    assert all(a <= b for a, b in zip(stamps, stamps[1:]))


def test_pipecat_interruption_stops_the_audio_and_cancels_on_the_server(server):
    start = len(server.log_lines())

    async def interrupted(worker, recorder):
        await worker.queue_frame(LLMFullResponseStartFrame())
        await worker.queue_frame(LLMTextFrame(LONG))
        await recorder.event(TTSAudioRawFrame).wait()  # speaking
        await worker.queue_frame(InterruptionFrame())
        await recorder.event(InterruptionFrame).wait()
        await asyncio.to_thread(ws_lines, server, start, 1)  # the server has dropped the rest
        # the next reply speaks, on the connection the cancel left open
        await worker.queue_frame(LLMFullResponseStartFrame())
        await worker.queue_frame(LLMTextFrame("Okay, stopping."))
        await worker.queue_frame(LLMFullResponseEndFrame())
        await recorder.event(TTSStoppedFrame).wait()

    frames = run(in_pipeline(server, interrupted))
    cut = next(i for i, frame in enumerate(frames) if isinstance(frame, InterruptionFrame))
    before = {frame.context_id for frame in frames[:cut] if isinstance(frame, TTSAudioRawFrame)}
    after = [frame for frame in frames[cut:] if isinstance(frame, TTSAudioRawFrame)]
    assert before and after and not before & {frame.context_id for frame in after}  # none of the cut reply's audio
    words = [frame.text for frame in frames[cut:] if isinstance(frame, TTSTextFrame)]
    assert " ".join(words) == "Okay, stopping."
    lines = ws_lines(server, start, 2)
    assert [line["status"] for line in lines] == ["cancelled", "ok"]
    wait_idle(server)
