"""The Wyoming door: Home Assistant's TTS protocol (the `wyoming` package) onto the same service.

- describe -> info: one TTS program whose voices are the design voices and the saved voices, each
  speaking every language the model knows (as codes), with streaming supported.
- synthesize -> audio-start (24 kHz, 16-bit, mono), an audio-chunk per piece as each is decoded,
  audio-stop.
- synthesize-start, synthesize-chunk..., synthesize-stop: each sentence joins the engine as soon as
  it is complete (service.TextSpeech), so the first is spoken while the reply is still being
  written; the stop flushes the rest, then audio-stop and synthesize-stopped. A plain synthesize
  inside a stream is Home Assistant's copy of the same text for older servers, and is ignored.
- Refusals (unknown voice, empty text, a full queue, the server loading) are `error` events; the
  connection keeps serving. A client that leaves has its work items cancelled at the next step.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from urllib.parse import urlparse

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event
from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice
from wyoming.server import AsyncEventHandler, AsyncServer
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from codes import __version__
from codes.common.errors import UserError
from codes.runtime.engine import QueueFull
from codes.runtime.specs import SAMPLE_RATE
from codes.runtime.voice_design import LANGUAGE_IDS
from codes.serve.encode import pcm16
from codes.serve.service import RequestError, ServerState, SpeechParams, TextSpeech, open_speech, parse_speech
from codes.serve.speech import SpeechJob, StreamFailed

logger = logging.getLogger("omnivoice.serve")

WIDTH, CHANNELS = 2, 1
CHUNK_SAMPLES = SAMPLE_RATE // 4  # audio-chunk size: a quarter second, as players buffer it
LANGUAGE_VOICE = "alloy"  # the design voice for a request that names only a language
ATTRIBUTION = Attribution(name="k2-fsa OmniVoice, run by omnivoice-onnx", url="https://github.com/k2-fsa/OmniVoice")


def check_uri(uri: str) -> str:
    """A --wyoming-uri as the wyoming package takes it: tcp://HOST:PORT or unix://PATH."""
    parsed = urlparse(uri)
    if parsed.scheme == "tcp" and parsed.hostname and parsed.port:
        return uri
    if parsed.scheme == "unix" and parsed.path:
        return uri
    raise UserError(f"--wyoming-uri {uri!r} is not tcp://HOST:PORT or unix://PATH; e.g. tcp://0.0.0.0:10200")


def info(state: ServerState) -> Info:
    """The program and its voices, read anew each time (a voice saved over HTTP shows at once)."""
    languages = sorted(LANGUAGE_IDS)
    voices = [TtsVoice(name=entry["id"], attribution=ATTRIBUTION, installed=True, version=None, languages=languages,
                       description=entry.get("instruct") or f"saved voice {entry['id']}")
              for entry in state.voices.book.listing()]
    program = TtsProgram(name="omnivoice-onnx", attribution=ATTRIBUTION, installed=True, version=__version__,
                         description="OmniVoice zero-shot TTS on ONNX Runtime", voices=voices,
                         supports_synthesize_streaming=True)
    return Info(tts=[program])


def _fields(voice, text: str | None) -> dict:
    """A Wyoming voice (name, or only a language) as a speech request's fields."""
    fields = {"voice": LANGUAGE_VOICE, "response_format": "pcm"}
    if text is not None:
        fields["input"] = text
    if voice is not None and voice.name:
        fields["voice"] = voice.name
    elif voice is not None and voice.language:
        fields["language"] = voice.language
    return fields


class SpeechHandler(AsyncEventHandler):
    """One client connection; its requests run one after another, each in a task, so the handler
    keeps reading (text chunks, or the end of the connection) while audio is sent."""

    def __init__(self, state: ServerState, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.state = state
        self.task: asyncio.Task | None = None  # the request being spoken
        self.streaming = False  # between synthesize-start and synthesize-stop
        self.stream: TextSpeech | None = None  # that stream, while it is taking text

    async def handle_event(self, event: Event) -> bool:
        if Describe.is_type(event.type):
            listing = await asyncio.get_running_loop().run_in_executor(None, info, self.state)
            await self.write_event(listing.event())
            return True
        if Synthesize.is_type(event.type):
            if not self.streaming:  # inside a stream it repeats the streamed text for older servers
                await self._wait()
                request = Synthesize.from_event(event)
                self.task = asyncio.create_task(self._one_shot(request))
            return True
        if SynthesizeStart.is_type(event.type):
            await self._wait()
            self.streaming = True
            await self._start_stream(SynthesizeStart.from_event(event))
            return True
        if SynthesizeChunk.is_type(event.type):
            if self.stream is not None:
                await self._refusing(self.stream.push, SynthesizeChunk.from_event(event).text)
            return True
        if SynthesizeStop.is_type(event.type):
            if self.stream is not None:
                await self._refusing(self.stream.close)
            self.stream, self.streaming = None, False
            await self._wait()
            await self.write_event(SynthesizeStopped().event())
            return True
        return True

    async def disconnect(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task

    async def _wait(self) -> None:
        """Until the request before has ended, however it ended (it reports its own errors)."""
        if self.task is not None:
            await asyncio.wait({self.task})
            if not self.task.cancelled():
                self.task.exception()  # retrieved: its failure was logged or sent already
            self.task = None

    async def _error(self, message: str, code: str | None = None) -> None:
        await self.write_event(Error(text=message, code=code).event())

    async def _refusing(self, action, *args) -> None:
        """Run a stream's push or close; a refusal (text past the limit, a full queue) ends that
        stream with an error event, and the rest of its text is ignored."""
        try:
            action(*args)
        except (RequestError, UserError) as exc:
            await self._end_stream(self.stream.job, str(exc), _code(exc))

    async def _end_stream(self, job: SpeechJob, message: str, code: str | None) -> None:
        self.stream = None
        job.status, job.reason = "error", message
        job.cancel()
        job.close()
        await self._error(message, code)

    async def _one_shot(self, request: Synthesize) -> None:
        try:
            params = parse_speech(_fields(request.voice, request.text), self.state.config)
            synth = self.state.admit()
        except (RequestError, UserError) as exc:
            return await self._error(str(exc), _code(exc))
        try:
            try:
                job = await open_speech(self.state, synth, params, "wyoming")
            except (RequestError, UserError, StreamFailed) as exc:
                return await self._error(str(exc), _code(exc))
            await self._speak(job)
        finally:
            self.state.release()

    async def _start_stream(self, start: SynthesizeStart) -> None:
        try:
            params: SpeechParams = parse_speech(_fields(start.voice, None), self.state.config,
                                                streamed_text=True)
            synth = self.state.admit()
        except (RequestError, UserError) as exc:
            return await self._error(str(exc), _code(exc))
        self.stream = TextSpeech(self.state, synth, params, "wyoming")
        self.task = asyncio.create_task(self._streamed(self.stream))

    async def _streamed(self, stream: TextSpeech) -> None:
        try:
            try:
                await stream.open()
            except (RequestError, UserError) as exc:
                await self._end_stream(stream.job, str(exc), _code(exc))
                return stream.job.finish()
            await self._speak(stream.job)
        finally:
            self.state.release()

    async def _speak(self, job: SpeechJob) -> None:
        """audio-start, each piece's audio as it is decoded, audio-stop; the log line at the end."""
        started = False
        try:
            async for wav in job.pieces():
                if not started:
                    await self.write_event(AudioStart(rate=SAMPLE_RATE, width=WIDTH, channels=CHANNELS).event())
                    started = True
                for start in range(0, len(wav), CHUNK_SAMPLES):
                    audio = pcm16(wav[start:start + CHUNK_SAMPLES], SAMPLE_RATE)
                    await self.write_event(AudioChunk(rate=SAMPLE_RATE, width=WIDTH, channels=CHANNELS,
                                                      audio=audio).event())
            if job.status == "error":  # refused mid-stream: the error event is sent already
                return
            if started:
                await self.write_event(AudioStop().event())
            elif not job.requests:
                job.status, job.reason = "error", "no text"
                await self._error("the text is empty; send at least one word to speak", "empty_text")
        except StreamFailed as exc:
            job.status, job.reason = "error", str(exc)
            await self._error(str(exc), "generation_failed")
        except ConnectionError:  # the client left while audio was being sent
            job.status = "disconnected"
        except asyncio.CancelledError:
            if job.status == "error":  # its items were cancelled because the stream was refused
                return
            job.status = "disconnected"
            raise
        finally:
            job.cancel()
            job.finish()


def _code(exc: Exception) -> str | None:
    """The error event's code: the service's own, or what kind of refusal it was."""
    return getattr(exc, "code", None) or ("queue_full" if isinstance(exc, QueueFull) else None)


class WyomingDoor:
    """The Wyoming server beside the HTTP one, in its event loop (started and stopped with it)."""

    def __init__(self, state: ServerState, uri: str, zeroconf_name: str | None = None):
        self.state, self.uri, self.zeroconf_name = state, check_uri(uri), zeroconf_name
        self.server: AsyncServer | None = None

    @contextlib.asynccontextmanager
    async def running(self):
        self.server = AsyncServer.from_uri(self.uri)
        await self.server.start(lambda reader, writer: SpeechHandler(self.state, reader, writer))
        logger.info("wyoming: listening on %s", self.uri)
        if self.zeroconf_name:
            await self._announce()
        try:
            yield
        finally:
            await self.server.stop()

    async def _announce(self) -> None:
        try:
            from wyoming.zeroconf import HomeAssistantZeroconf
        except ImportError:
            logger.warning("wyoming: zeroconf is not installed (pip install zeroconf); not announced")
            return
        port = urlparse(self.uri).port
        try:
            await HomeAssistantZeroconf(port=port, name=self.zeroconf_name).register_server()
        except OSError as exc:  # no multicast route: serve anyway, Home Assistant can be pointed at it by hand
            logger.warning("wyoming: cannot announce %s on the network (%s); add it by host and port",
                           self.zeroconf_name, exc)
            return
        logger.info("wyoming: announced as %s on port %s", self.zeroconf_name, port)
