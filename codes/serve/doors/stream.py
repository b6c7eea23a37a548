"""The WebSocket door for voice agents: text in as an LLM writes it, audio out as it is made, when each
piece of text is heard, and barge-in. The messages are in docs/agents.md.

    client -> server (JSON text frames)             server -> client
    {"type": "start", "voice": ..., ...}            binary frames: s16le, 24 kHz, mono
    {"type": "text", "text": "..."}                 {"type": "timing", "text", "start", "end", "words"?}
    {"type": "flush"}                               {"type": "cancelled"}
    {"type": "cancel"}                              {"type": "done"}, and the server closes
    {"type": "end"}                                 {"type": "error", "error": {...}}, and it closes

A connection speaks one utterance at a time, each a lifecycle.SpeechRequest with streamed text: it holds a
request slot only while it has text to speak. `cancel` ends the utterance (its queued items leave the
engine at once, the one in a running step at that step's end, its slot is free before `cancelled` is
sent, and no audio of it follows) and the connection's next text opens a fresh utterance with the
same fields (an `end` with none opened is a `done`); timings count from each utterance's first sample.
Every error ends the connection.

Bounds (codes/serve/edge/limits.py): --ws-max-connections, --ws-max-message-bytes (also uvicorn's frame
cap, so a larger message is never held), --ws-max-chars and --ws-max-messages a connection may send,
--ws-idle-seconds without a message while none of its audio is being made, --ws-write-seconds a
client may leave its audio unread. The key and the web-page rules are codes/serve/doors/guard.py's, as for /v1.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

from starlette.websockets import WebSocket, WebSocketDisconnect

from codes.runtime.contract.specs import SAMPLE_RATE
from codes.serve.core.encode import pcm16
from codes.serve.core.lifecycle import SpeechRequest
from codes.serve.core.params import SpeechParams, parse_speech
from codes.serve.core.state import ServerState
from codes.serve.edge.errors import REFUSALS, ClientStalled, RequestError, as_request_error, bounded_write
from codes.serve.edge.limits import excerpt, flag

logger = logging.getLogger("omnivoice.serve")

STREAM_PATH = "/v1/audio/speech/stream"
SUBPROTOCOL = "omnivoice"  # what the server accepts where the client offers subprotocols (the key's: guard.py)
FRAME_SAMPLES = SAMPLE_RATE // 2  # a binary frame: half a second, well under any client's message cap
NOT_STREAMED = ("input", "duration", "stream_format", "stream")  # fields of a whole text, not of a stream
# Close codes (RFC 6455): the client's fault, the server's, or try again later.
POLICY, SERVER_ERROR, TRY_LATER = 1008, 1011, 1013

# How a client that went away shows itself: it closed, its socket broke, or it stopped reading.
CONNECTION_LOST = (WebSocketDisconnect, ClientStalled, ConnectionError)


class Refused(Exception):
    """A message or a client's behaviour that ends the connection, with the error it is told."""

    def __init__(self, error: RequestError):
        super().__init__(error.message)
        self.error = error


def _refused(message: str, code: str, param: str | None = None) -> Refused:
    return Refused(RequestError(400, message, param, code))


class SpeechSocket:
    """One connection: reads messages and turns them into calls on its utterance's SpeechRequest, whose
    audio and timings a task of its own sends."""

    def __init__(self, state: ServerState, websocket: WebSocket):
        self.state, self.websocket = state, websocket
        self.limits = state.config.limits
        self.params: SpeechParams | None = None  # set by start
        self.speaking: SpeechRequest | None = None  # the utterance taking text
        self.sender: asyncio.Task | None = None  # its audio, timings and done
        self.chars = self.messages = 0
        self.finished = asyncio.Event()  # done or an error was sent: the connection ends
        self.sending = asyncio.Lock()  # one message at a time, whichever task sends it

    async def run(self) -> None:
        offered = self.websocket.scope.get("subprotocols") or []
        await self.websocket.accept(subprotocol=SUBPROTOCOL if SUBPROTOCOL in offered else None)
        try:
            while not self.finished.is_set():
                message = await self._next_message()
                if message is None:
                    break
                await self._handle(message)
        except Refused as exc:
            await self._fail(exc.error)
        except CONNECTION_LOST:
            pass  # the client left or stopped reading: its utterance ends below
        finally:
            await self._stop_utterance()

    # --- reading ---------------------------------------------------------------------------------

    async def _next_message(self) -> dict | None:
        """The next JSON message (None once the connection has ended). Refused: a message past its
        size, past the connection's count, not JSON, or nothing for --ws-idle-seconds while none of
        the client's audio is being made. The read outlives each wait, so no message is half-read."""
        reading = asyncio.ensure_future(self.websocket.receive())
        ended = asyncio.ensure_future(self.finished.wait())
        try:
            while True:
                done, _ = await asyncio.wait({reading, ended}, timeout=self.limits.ws_idle_seconds,
                                             return_when=asyncio.FIRST_COMPLETED)
                if reading in done:
                    break
                if ended in done:
                    return None
                if not self._speaking():
                    raise _refused(f"nothing came for {self.limits.ws_idle_seconds:g} s ({flag('ws_idle_seconds')}); "
                                   "send text as it is written and end with {\"type\": \"end\"}", "idle_timeout")
        finally:
            for waiting in (reading, ended):
                waiting.cancel()
        message = reading.result()
        if message["type"] == "websocket.disconnect":
            return None
        self.messages += 1
        if self.messages > self.limits.ws_max_messages:
            raise _refused(f"over {self.limits.ws_max_messages} messages on one connection "
                           f"({flag('ws_max_messages')}); send text in larger pieces", "too_many_messages")
        text = message.get("text")
        if text is None:
            raise _refused("binary messages are not taken; send JSON text messages", "not_json")
        if len(text) > self.limits.ws_max_message_bytes or len(text.encode()) > self.limits.ws_max_message_bytes:
            raise Refused(RequestError(413, f"a message is over {self.limits.ws_max_message_bytes} bytes "
                                            f"({flag('ws_max_message_bytes')}); send text in smaller pieces",
                                       code="message_too_large"))
        try:
            body = json.loads(text)
        except json.JSONDecodeError:
            raise _refused(f"a message is not JSON ({excerpt(text)}); send {{\"type\": ...}} objects",
                           "not_json") from None
        if not isinstance(body, dict) or not isinstance(body.get("type"), str):
            raise _refused(f"a message has no \"type\" ({excerpt(text)}); send start, text, flush, cancel or end",
                           "unknown_type", "type")
        return body

    def _speaking(self) -> bool:
        """The server owes the client something (audio being made, its voice being resolved for text it sent,
        the rest after its `end`, words being aligned): it rightly sends nothing meanwhile."""
        return self.speaking is not None and self.sender is not None and not self.sender.done() and \
            self.speaking.owes_client

    async def _handle(self, body: dict) -> None:
        kind = body["type"]
        if kind == "start":
            return await self._start(body)
        if kind not in ("text", "flush", "cancel", "end"):
            raise _refused(f"unknown message type {excerpt(kind)}; send start, text, flush, cancel or end",
                           "unknown_type", "type")
        if self.params is None:
            raise _refused(f"{kind} before start; open with {{\"type\": \"start\", \"voice\": ...}}", "not_started",
                           "type")
        if kind == "text":
            await self._text(body)
        elif kind == "cancel":
            await self._cancel()
        elif self.speaking is not None:
            await self._refusing(self.speaking.flush if kind == "flush" else self.speaking.close)
        elif kind == "end":  # nothing came after a cancel: there is no utterance to speak
            await self._send({"type": "done"})
            await self._close(1000)

    async def _start(self, body: dict) -> None:
        if self.params is not None:
            raise _refused("start was sent already; a connection speaks with one set of fields", "started", "type")
        fields = {name: value for name, value in body.items() if name != "type"}
        for name in NOT_STREAMED:
            if name in fields:
                raise _refused(f"{name} is not taken on the stream; send text in text messages", "not_streamed", name)
        fields.setdefault("response_format", "pcm")
        if fields["response_format"] != "pcm":
            raise _refused(f"response_format must be pcm on the stream (s16le, 24 kHz, mono), got "
                           f"{excerpt(str(fields['response_format']))}", "unsupported_format", "response_format")
        try:
            self.params = parse_speech(fields, self.limits, self.state.config.settings, streamed_text=True,
                                       normalize=self.state.config.normalize_text)
        except REFUSALS as exc:
            raise Refused(as_request_error(exc)) from None
        self._begin()

    async def _text(self, body: dict) -> None:
        text = body.get("text")
        if not isinstance(text, str):
            raise _refused("a text message carries \"text\": a string", "bad_text", "text")
        self.chars += len(text)
        if self.chars > self.limits.ws_max_chars:
            raise _refused(f"over {self.limits.ws_max_chars} characters on one connection ({flag('ws_max_chars')}); "
                           "open a new connection", "too_much_text", "text")
        if self.speaking is None:  # the first text after a cancel opens the next utterance
            self._begin()
        await self._refusing(self.speaking.push, text)

    async def _refusing(self, action, *args) -> None:
        """A SpeechRequest's push, flush or close; a refusal (the text past --max-input-chars, a full server)
        ends the connection."""
        try:
            await action(*args)
        except REFUSALS as exc:
            raise Refused(as_request_error(exc)) from None

    # --- the utterance ---------------------------------------------------------------------------

    def _begin(self) -> None:
        self.speaking = SpeechRequest(self.state, self.params, "ws", streamed_text=True)
        self.sender = asyncio.create_task(self._speak(self.speaking))

    async def _speak(self, speaking: SpeechRequest) -> None:
        """The utterance's audio in binary frames, each piece's timing after its audio, then done."""
        try:
            async with speaking:
                try:
                    async for heard in speaking.heard():
                        if isinstance(heard, dict):  # a piece's timing (its words, where asked), after its audio
                            await self._send({"type": "timing", **heard})
                            continue
                        audio = pcm16(heard.wav, SAMPLE_RATE)
                        for start in range(0, len(audio), 2 * FRAME_SAMPLES):
                            await self._send(audio[start:start + 2 * FRAME_SAMPLES])
                except WebSocketDisconnect:
                    # The client closed while its audio went out. What it sent before closing (a barge-in's
                    # cancel) is still to be read, then the close: the reader ends this utterance with the
                    # word that fits and cancels this task. The bound only keeps a close that never reached
                    # the reader from holding the slot.
                    await asyncio.sleep(self.limits.ws_write_seconds)
            if speaking.completed:
                await self._send({"type": "done"})
                await self._close(1000)
        except REFUSALS as exc:
            await self._fail(as_request_error(exc))
        except CONNECTION_LOST:
            self.finished.set()

    async def _cancel(self) -> None:
        """Barge-in: the utterance's items leave the engine, its slot is freed and its sender stopped
        before `cancelled` goes; the next text opens a fresh utterance (one opened now would be logged as
        speech that never was if the client then left)."""
        await self._stop_utterance("cancelled", "the client cancelled (barge-in)")
        await self._send({"type": "cancelled"})

    async def _stop_utterance(self, status: str = "disconnected", reason: str | None = None) -> None:
        speaking, sender, self.speaking, self.sender = self.speaking, self.sender, None, None
        if sender is not None and not sender.done():  # a finished one has written its log line
            speaking.end(status, reason)
            sender.cancel()
            with contextlib.suppress(BaseException):
                await sender

    # --- writing ---------------------------------------------------------------------------------

    async def _send(self, message: bytes | dict) -> None:
        """One message, within --ws-write-seconds: a client that reads nothing is let go."""
        def stalled(reason: str) -> None:
            if self.speaking is not None:
                self.speaking.end("disconnected", reason)
            logger.warning("ws: letting a client go: %s", reason)

        async with self.sending:
            sending = (self.websocket.send_bytes(message) if isinstance(message, bytes)
                       else self.websocket.send_text(json.dumps(message)))
            await bounded_write(sending, self.limits.ws_write_seconds, "ws_write_seconds", stalled)

    async def _fail(self, error: RequestError) -> None:
        """The error in the API's envelope, then the connection closed (a close code by whose fault)."""
        if self.finished.is_set():
            return
        if self.speaking is not None and self.sender is not None and not self.sender.done():
            self.speaking.end("error", error.message)
        code = TRY_LATER if error.status in (429, 503) else SERVER_ERROR if error.status >= 500 else POLICY
        with contextlib.suppress(*CONNECTION_LOST, RuntimeError):
            await self._send(error.event())
            await self._close(code)
        self.finished.set()

    async def _close(self, code: int) -> None:
        self.finished.set()
        with contextlib.suppress(*CONNECTION_LOST, RuntimeError, TimeoutError):
            async with asyncio.timeout(self.limits.ws_write_seconds):
                await self.websocket.close(code)


def add_stream_door(app, state: ServerState) -> None:
    """The door's route on the HTTP app (behind app.py's guard: the key, the web-page rules)."""
    sockets: set[SpeechSocket] = set()

    @app.websocket(STREAM_PATH)
    async def speech_stream(websocket: WebSocket):
        most = state.config.limits.ws_max_connections
        if len(sockets) >= most:  # refused before it holds anything but its socket
            await websocket.accept()
            refused = RequestError(429, f"the server has {most} stream connections open ({flag('ws_max_connections')}); "
                                        "retry shortly", code="too_many_connections", kind="rate_limit_error")
            await websocket.send_text(json.dumps(refused.event()))
            await websocket.close(TRY_LATER)
            return
        socket = SpeechSocket(state, websocket)
        sockets.add(socket)
        try:
            await socket.run()
        finally:
            sockets.discard(socket)
