"""The Wyoming door: Home Assistant's TTS protocol (the `wyoming` package) onto the same service.

- describe -> info: one TTS program whose voices are the design voices, the imported and the saved
  voices (languages: see ASSIST_LANGUAGES; an imported voice lists its language folder's), with streaming
  supported.
- synthesize -> audio-start (24 kHz, 16-bit, mono), an audio-chunk per piece as each is decoded,
  audio-stop; each carries its timestamp, milliseconds from the first sample.
- synthesize-start, synthesize-chunk..., synthesize-stop: each sentence joins the engine as soon as
  it is complete (lifecycle.SpeechRequest.push), so the first is spoken while the reply is still being
  written; the stop flushes the rest, then audio-stop and synthesize-stopped. A plain synthesize
  inside a stream is Home Assistant's copy of the same text for older servers, and is ignored.
- Refusals (unknown voice, empty text, a full queue, the server loading, a second synthesize-start
  inside a stream) are `error` events; the connection keeps serving. A client that leaves has its work
  items cancelled at the next step.
- Bounds (docs/DESIGN.md §wyoming-bounds): every event is read by wyoming_wire.read_event, which refuses
  a length past its cap before reading it; past --wyoming-max-connections a connection gets an error
  and is closed; a client that sends nothing for --wyoming-idle-seconds while none of its audio is
  being made (an open stream with no text included), or leaves its audio unread for
  --wyoming-write-seconds, gets an error where it can and is closed, which frees its slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from urllib.parse import urlparse

from wyoming.audio import AudioChunk, AudioStart, AudioStop
from wyoming.error import Error
from wyoming.event import Event, async_write_event
from wyoming.info import Attribution, Describe, Info, TtsProgram, TtsVoice
from wyoming.server import AsyncEventHandler
from wyoming.tts import Synthesize, SynthesizeChunk, SynthesizeStart, SynthesizeStop, SynthesizeStopped

from codes.common.errors import UserError
from codes.common.version import VERSION
from codes.runtime.contract.specs import SAMPLE_RATE
from codes.runtime.text.voice_design import LANGUAGE_IDS
from codes.serve.core.encode import pcm16
from codes.serve.core.lifecycle import SpeechRequest
from codes.serve.core.params import parse_speech
from codes.serve.core.state import ServerState
from codes.serve.doors.wyoming_wire import MAX_HEADER_BYTES, EventRefused, encoded, read_event
from codes.serve.edge.errors import REFUSALS, RequestError, as_request_error, bounded_write
from codes.serve.edge.limits import flag

logger = logging.getLogger("omnivoice.serve")

WIDTH, CHANNELS = 2, 1
CHUNK_SAMPLES = SAMPLE_RATE // 4  # audio-chunk size: a quarter second, as players buffer it
LANGUAGE_VOICE = "alloy"  # the design voice for a request that names only a language
ATTRIBUTION = Attribution(name="k2-fsa OmniVoice, run by omnivoice-onnx", url="https://github.com/k2-fsa/OmniVoice")
# Home Assistant offers a Wyoming voice under each language its `languages` lists, and the engine's
# languages are their union, so listing all 646 on every voice made describe 4.6 MB at 1000 voices.
# The whole list goes once, on LANGUAGE_VOICE; the other voices list the languages Home Assistant's
# Assist runs pipelines in (its homeassistant/generated/languages.py, as base codes) that the model knows.
ASSIST_LANGUAGES = sorted(LANGUAGE_IDS & set(
    "af ar bg bn bs ca cs cy da de el en eo es et eu fa fi fr fy ga gl gsw he hi hr hu hy id is it ja ka ko lb lt "
    "lv mk ml nb nl nn pl pt ro ru sk sl sq sr sv ta te th tr uk ur vi zh".split()))


def check_uri(uri: str) -> str:
    """A --wyoming-uri: tcp://HOST:PORT, or unix://PATH where nothing is yet (the socket is this
    server's, so it never replaces, and on exit never deletes, a file it did not make)."""
    parsed = urlparse(uri)
    if parsed.scheme == "tcp" and parsed.hostname and parsed.port:
        return uri
    if parsed.scheme == "unix" and parsed.path:
        if os.path.lexists(parsed.path):
            raise UserError(f"--wyoming-uri {uri!r}: {parsed.path} exists; remove it if it is a stale socket, "
                            "or give another path")
        return uri
    raise UserError(f"--wyoming-uri {uri!r} is not tcp://HOST:PORT or unix://PATH; e.g. tcp://127.0.0.1:10200")


def info(listing: list[dict]) -> Info:
    """The program and its voices (see ASSIST_LANGUAGES for which voice lists which languages)."""
    voices = [TtsVoice(name=entry["id"], attribution=ATTRIBUTION, installed=True, version=None,
                       languages=_languages(entry), description=entry.get("instruct") or f"saved voice {entry['id']}")
              for entry in listing]
    program = TtsProgram(name="omnivoice-onnx", attribution=ATTRIBUTION, installed=True, version=VERSION,
                         description="OmniVoice zero-shot TTS on ONNX Runtime", voices=voices,
                         supports_synthesize_streaming=True)
    return Info(tts=[program])


def _languages(entry: dict) -> list[str]:
    """Every language on LANGUAGE_VOICE; an imported voice's own (its wyoming-piper language folder's);
    else Assist's."""
    if entry["id"] == LANGUAGE_VOICE:
        return sorted(LANGUAGE_IDS)
    return [entry["language"]] if entry.get("language") else ASSIST_LANGUAGES


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
    keeps reading (text chunks, or the end of the connection) while audio is sent. Each request's
    life is a lifecycle.SpeechRequest; this class only translates events to and from it."""

    def __init__(self, door: "WyomingDoor", *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.door, self.state = door, door.state
        self.limits = door.state.config.limits
        self.task: asyncio.Task | None = None  # the request being spoken
        self.streaming = False  # between synthesize-start and synthesize-stop
        self.stream: SpeechRequest | None = None  # that stream, while it is taking text

    async def run(self) -> None:
        """The package's loop, on the bounded reader: a refused event or an idle client gets an error
        event where it can and the connection ends (which ends its request)."""
        self._is_running = True
        try:
            while self._is_running:
                try:
                    event = await self._next_event()
                    if event is None or not await self.handle_event(event):
                        break
                except EventRefused as exc:
                    await self._refuse_connection(str(exc), exc.code)
                    break
        except ConnectionError:  # the client left, or stopped reading (write_event)
            pass
        finally:
            await self.disconnect()
            self.writer.close()

    async def _next_event(self) -> Event | None:
        """The client's next event; EventRefused once it has sent nothing for --wyoming-idle-seconds
        while none of its audio is being made. The read is never cut short, so no event is half-read."""
        reading = asyncio.ensure_future(read_event(self.reader, self.limits.max_body_bytes))
        try:
            while True:
                done, _ = await asyncio.wait({reading}, timeout=self.limits.wyoming_idle_seconds)
                if done:
                    return reading.result()
                if not self._speaking():
                    seconds = self.limits.wyoming_idle_seconds
                    raise EventRefused(f"nothing came for {seconds:g} s ({flag('wyoming_idle_seconds')}); send a stream's "
                                       "text as it is written and end it with synthesize-stop", "idle_timeout")
        finally:
            reading.cancel()

    def _speaking(self) -> bool:
        """A one-shot request's audio is being made, or a stream owes its client something (its voice being
        resolved for text it sent, audio being made): the client rightly sends nothing meanwhile."""
        return self.task is not None and not self.task.done() and (self.stream is None or self.stream.owes_client)

    async def _refuse_connection(self, message: str, code: str) -> None:
        logger.warning("wyoming: closing a connection: %s", message)
        with contextlib.suppress(ConnectionError):
            if self.stream is not None:
                await self._end_stream(message, code)
            else:
                await self._error(message, code)

    async def write_event(self, event: Event) -> None:
        await self._bounded(async_write_event(event, self.writer))

    async def write_encoded(self, wire: bytes) -> None:
        self.writer.write(wire)
        await self._bounded(self.writer.drain())

    async def _bounded(self, writing) -> None:
        """Past --wyoming-write-seconds the connection is dropped (its buffer with it, docs/DESIGN.md
        §wyoming-bounds), and what it held (its slot, its items) is freed."""
        await bounded_write(writing, self.limits.wyoming_write_seconds, "wyoming_write_seconds",
                            lambda _: self.writer.transport.abort())

    async def handle_event(self, event: Event) -> bool:
        if Describe.is_type(event.type):
            wire = await asyncio.get_running_loop().run_in_executor(None, self.door.described)
            await self.write_encoded(wire)
            return True
        if Synthesize.is_type(event.type):
            if not self.streaming:  # inside a stream it repeats the streamed text for older servers
                await self._wait()
                request = Synthesize.from_event(event)
                self._begin(_fields(request.voice, request.text), streamed_text=False)
            return True
        if SynthesizeStart.is_type(event.type):
            if self.streaming:  # waiting for the open stream's end would wait for a stop that may never come
                await self._error("a stream is already open on this connection; send synthesize-stop before the "
                                  "next synthesize-start", "stream_open")
                return True
            await self._wait()
            self.streaming = True
            self.stream = self._begin(_fields(SynthesizeStart.from_event(event).voice, None), streamed_text=True)
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

    def _begin(self, fields: dict, streamed_text: bool) -> SpeechRequest | None:
        """A request spoken in its own task; a refusal of its fields is an error event in that task."""
        try:
            params = parse_speech(fields, self.limits, self.state.config.settings, streamed_text=streamed_text,
                                  normalize=self.state.config.normalize_text)
        except REFUSALS as exc:
            self.task = asyncio.create_task(self._report(exc))
            return None
        speaking = SpeechRequest(self.state, params, "wyoming", streamed_text=streamed_text)
        self.task = asyncio.create_task(self._speak(speaking))
        return speaking

    async def _refusing(self, action, *args) -> None:
        """Run a stream's push or close; a refusal (text past the limit, a full server) ends that
        stream with an error event, and the rest of its text is ignored."""
        try:
            await action(*args)
        except REFUSALS as exc:
            error = as_request_error(exc)
            await self._end_stream(error.message, _code(error))

    async def _end_stream(self, message: str, code: str | None) -> None:
        stream, self.stream = self.stream, None
        stream.end("error", message)
        await self._error(message, code)

    async def _speak(self, speaking: SpeechRequest) -> None:
        """The request's life: audio-start, each piece's audio as it is decoded, audio-stop; an error
        event for a refusal or a failure."""
        try:
            async with speaking:
                started = False
                async for piece in speaking.spoken():
                    if not started:
                        await self.write_event(AudioStart(rate=SAMPLE_RATE, width=WIDTH, channels=CHANNELS,
                                                          timestamp=0).event())
                        started = True
                    wav = piece.wav
                    for start in range(0, len(wav), CHUNK_SAMPLES):
                        audio = pcm16(wav[start:start + CHUNK_SAMPLES], SAMPLE_RATE)
                        await self.write_event(AudioChunk(rate=SAMPLE_RATE, width=WIDTH, channels=CHANNELS, audio=audio,
                                                          timestamp=_milliseconds(piece.start + start)).event())
                if started and speaking.completed:
                    await self.write_event(AudioStop(timestamp=_milliseconds(speaking.job.audio_samples)).event())
        except ConnectionError:  # the client left, or stopped reading: nothing more can reach it
            pass
        except REFUSALS as exc:
            await self._report(exc)

    async def _report(self, exc: Exception) -> None:
        error = as_request_error(exc)
        with contextlib.suppress(ConnectionError):
            await self._error(error.message, _code(error))


def _milliseconds(samples: int) -> int:
    """An audio event's timestamp: milliseconds from the stream's first sample (the protocol's unit;
    it has no event that says which text is heard when, docs/wyoming.md)."""
    return samples * 1000 // SAMPLE_RATE


def _code(error: RequestError) -> str | None:
    """The error event's code: the service's own, or what kind of refusal it was."""
    return error.code or ("queue_full" if error.status == 429 else None)


class WyomingDoor:
    """The Wyoming server beside the HTTP one, in its event loop (started and stopped with it). It
    listens itself rather than through the package's AsyncServer, which deletes whatever is at a
    unix:// path and reads with the package's unbounded reader."""

    def __init__(self, state: ServerState, uri: str, zeroconf_name: str | None = None):
        self.state, self.uri, self.zeroconf_name = state, check_uri(uri), zeroconf_name
        self.handlers: set[SpeechHandler] = set()
        self._described: tuple[tuple, bytes] | None = None  # (the voice list, describe's answer to it)
        self._announced = None  # (zeroconf, service info) while announced

    @contextlib.asynccontextmanager
    async def running(self):
        server, socket_path = await self._listen()
        logger.info("wyoming: listening on %s", self.uri)
        try:
            if self.zeroconf_name:
                await self._announce()
            yield
        finally:
            server.close()
            for handler in list(self.handlers):
                await handler.stop()
            await self._withdraw()
            if socket_path is not None:
                _remove_own_socket(*socket_path)

    async def _listen(self):
        """The listening server, and for unix:// the socket file this server made (path, inode)."""
        parsed = urlparse(self.uri)
        if parsed.scheme == "tcp":
            server = await asyncio.start_server(self._connected, parsed.hostname, parsed.port, limit=MAX_HEADER_BYTES)
            return server, None
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:  # bind fails on any file already there, where asyncio's own bind removes a socket file
            sock.bind(parsed.path)
        except OSError as exc:
            sock.close()
            raise UserError(f"--wyoming-uri {self.uri!r}: cannot make the socket ({exc}); give a path where "
                            "nothing is yet") from None
        server = await asyncio.start_unix_server(self._connected, sock=sock, limit=MAX_HEADER_BYTES)
        return server, (parsed.path, os.stat(parsed.path).st_ino)

    async def _connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handler = SpeechHandler(self, reader, writer)
        most = self.state.config.limits.wyoming_max_connections
        if len(self.handlers) >= most:  # refused before it can hold anything but this socket
            with contextlib.suppress(ConnectionError):
                await handler._error(f"the server has {most} Wyoming connections open ({flag('wyoming_max_connections')}); "
                                     "retry shortly", "too_many_connections")
            writer.close()
            return
        self.handlers.add(handler)
        try:
            await handler.run()
        finally:
            self.handlers.discard(handler)

    def described(self) -> bytes:
        """describe's answer on the wire, built again only when the voice list changed (called in an
        executor: listing reads --voices_dir, and building 1000 voices takes a while)."""
        listing = self.state.voices.book.listing()
        key = tuple((entry["id"], entry.get("instruct")) for entry in listing)
        cached = self._described
        if cached is None or cached[0] != key:
            cached = self._described = (key, encoded(info(listing).event()))
        return cached[1]

    async def _announce(self) -> None:
        try:
            from zeroconf.asyncio import AsyncServiceInfo, AsyncZeroconf
        except ImportError:
            logger.warning("wyoming: zeroconf is not installed (pip install zeroconf); not announced")
            return
        port = urlparse(self.uri).port
        try:
            service = AsyncServiceInfo("_wyoming._tcp.local.", f"{self.zeroconf_name}._wyoming._tcp.local.",
                                       addresses=[socket.inet_aton(_lan_address())], port=port)
            zeroconf = AsyncZeroconf()
            await zeroconf.async_register_service(service)
        except OSError as exc:  # no multicast route: serve anyway, Home Assistant can be pointed at it by hand
            logger.warning("wyoming: cannot announce %s on the network (%s); add it by host and port",
                           self.zeroconf_name, exc)
            return
        self._announced = (zeroconf, service)
        logger.info("wyoming: announced as %s on port %s", self.zeroconf_name, port)

    async def _withdraw(self) -> None:
        """Take the announcement back, so Home Assistant does not keep offering a server that is gone."""
        if self._announced is None:
            return
        zeroconf, service = self._announced
        self._announced = None
        with contextlib.suppress(OSError):
            await zeroconf.async_unregister_service(service)
        await zeroconf.async_close()
        logger.info("wyoming: announcement of %s withdrawn", self.zeroconf_name)


def _lan_address() -> str:
    """The address multicast leaves from, as the wyoming package finds it (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.setblocking(False)
        probe.connect(("224.0.0.251", 1))
        return probe.getsockname()[0]


def _remove_own_socket(path: str, inode: int) -> None:
    """Delete the socket file this server made, and nothing that has taken its place since."""
    with contextlib.suppress(FileNotFoundError):
        if os.stat(path).st_ino == inode:
            os.unlink(path)
