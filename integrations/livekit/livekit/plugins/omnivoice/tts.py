"""omnivoice.TTS: LiveKit Agents' streaming TTS over an omnivoice-onnx server's WebSocket door.

One WebSocket per SynthesizeStream (docs/agents.md has the messages): push_text sends `text`, flush sends
`flush`, end_input sends `end`; audio frames (s16le, 24 kHz, mono) go to the AudioEmitter as they come, and
each `timing` becomes TimedStrings with their start and end, LiveKit's aligned transcript: one a word where
the server timed the words (word_timings=True, on a server whose build aligns), else one a piece of text. A stream closed
before `done` (the agent was interrupted) sends `cancel` first, so the server drops the rest at once, and closes
once the server has said `cancelled`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from urllib.parse import urlsplit, urlunsplit

import aiohttp
from livekit.agents import (
    DEFAULT_API_CONNECT_OPTIONS,
    APIConnectionError,
    APIConnectOptions,
    APIError,
    APITimeoutError,
    tts,
    utils,
)
from livekit.agents.voice.io import TimedString

SAMPLE_RATE = 24000
STREAM_PATH = "/v1/audio/speech/stream"
CANCEL_SECONDS = 1.0  # how long an interrupted stream waits for the server's `cancelled` before it just closes


def stream_url(base_url: str) -> str:
    """The door's ws:// or wss:// address from the server's http(s):// (or ws(s)://) base."""
    parts = urlsplit(base_url.rstrip("/"))
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss"):
        raise ValueError(f"base_url {base_url!r} is not http(s):// or ws(s)://; e.g. http://127.0.0.1:8000")
    path = parts.path.removesuffix("/v1")  # an OpenAI-style base URL works too
    return urlunsplit((scheme, parts.netloc, path + STREAM_PATH, "", ""))


class TTS(tts.TTS):
    def __init__(self, *, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None, voice: str = "alloy",
                 language: str | None = None, instructions: str | None = None, speed: float | None = None,
                 num_steps: int | None = None, seed: int | None = None, word_timings: bool = False,
                 http_session: aiohttp.ClientSession | None = None) -> None:
        """base_url: the server (serve.py); api_key: its --api-key (default: $OMNIVOICE_API_KEY); voice: a
        built-in name or a saved voice's id; word_timings: the transcript word by word, each word when it is
        heard (the server aligns each piece with its recogniser: one pass a piece, so off unless asked); the
        rest as the speech API's fields of the same names."""
        super().__init__(capabilities=tts.TTSCapabilities(streaming=True, aligned_transcript=True),
                         sample_rate=SAMPLE_RATE, num_channels=1)
        self._url = stream_url(base_url)
        self._api_key = api_key or os.environ.get("OMNIVOICE_API_KEY")
        fields = {"voice": voice, "language": language, "instructions": instructions, "speed": speed,
                  "num_steps": num_steps, "seed": seed, "word_timings": word_timings or None}
        self._start = {"type": "start", **{name: value for name, value in fields.items() if value is not None}}
        self._session = http_session

    @property
    def model(self) -> str:
        return "omnivoice"

    @property
    def provider(self) -> str:
        return "omnivoice-onnx"

    def synthesize(self, text: str, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS
                   ) -> tts.ChunkedStream:
        return self._synthesize_with_stream(text, conn_options=conn_options)

    def stream(self, *, conn_options: APIConnectOptions = DEFAULT_API_CONNECT_OPTIONS) -> OmniVoiceStream:
        return OmniVoiceStream(tts=self, conn_options=conn_options)

    async def _connect(self, timeout: float) -> aiohttp.ClientWebSocketResponse:
        if self._session is None:
            self._session = utils.http_context.http_session()
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        try:
            return await asyncio.wait_for(self._session.ws_connect(self._url, headers=headers), timeout)
        except asyncio.TimeoutError:
            raise APITimeoutError(f"no answer from {self._url} within {timeout:g} s") from None
        except aiohttp.WSServerHandshakeError as exc:
            raise APIError(f"{self._url} refused the stream: {exc.status} {exc.message}", retryable=False) from exc
        except aiohttp.ClientError as exc:
            raise APIConnectionError(f"cannot reach {self._url}: {exc}") from exc


class OmniVoiceStream(tts.SynthesizeStream):
    """One utterance on one WebSocket (see the module's docstring)."""

    def __init__(self, *, tts: TTS, conn_options: APIConnectOptions) -> None:
        super().__init__(tts=tts, conn_options=conn_options)
        self._voice: TTS = tts

    async def _run(self, output_emitter: tts.AudioEmitter) -> None:
        request_id = utils.shortuuid()
        output_emitter.initialize(request_id=request_id, sample_rate=SAMPLE_RATE, num_channels=1,
                                  mime_type="audio/pcm", stream=True)
        output_emitter.start_segment(segment_id=request_id)
        ws = await self._voice._connect(self._conn_options.timeout)
        finished = False
        try:
            await ws.send_str(json.dumps(self._voice._start))
            sending = asyncio.create_task(self._send_input(ws))
            try:
                await self._receive(ws, output_emitter)
                finished = True
            finally:
                await utils.aio.cancel_and_wait(sending)
            output_emitter.end_segment()
        finally:
            if not finished and not ws.closed:  # interrupted, or failed: the server drops the rest now
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(self._cancel(ws), CANCEL_SECONDS)
            await ws.close()

    @staticmethod
    async def _cancel(ws: aiohttp.ClientWebSocketResponse) -> None:
        """`cancel`, then what was already on its way, up to `cancelled`. A receive cut short makes aiohttp's
        close drop the connection at once, and a socket closed with audio unread is reset: the server's next
        write could then fail before it read the cancel, and it would see a dropped client instead."""
        await ws.send_str(json.dumps({"type": "cancel"}))
        async for message in ws:
            if message.type == aiohttp.WSMsgType.TEXT and json.loads(message.data)["type"] in ("cancelled", "error"):
                return

    async def _send_input(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        async for data in self._input_ch:
            if isinstance(data, self._FlushSentinel):
                await ws.send_str(json.dumps({"type": "flush"}))
            elif data:
                self._mark_started()
                await ws.send_str(json.dumps({"type": "text", "text": data}))
        await ws.send_str(json.dumps({"type": "end"}))

    async def _receive(self, ws: aiohttp.ClientWebSocketResponse, output_emitter: tts.AudioEmitter) -> None:
        """Audio and timings until `done`; the server's error as an APIError."""
        while True:
            message = await ws.receive()
            if message.type == aiohttp.WSMsgType.BINARY:
                output_emitter.push(message.data)
                continue
            if message.type != aiohttp.WSMsgType.TEXT:
                raise APIConnectionError(f"the server closed the stream before done (code {ws.close_code})")
            event = json.loads(message.data)
            if event["type"] == "timing":  # a piece of text and when it is heard, measured by the server
                for heard in event.get("words") or [event]:  # its words, where the server timed them
                    output_emitter.push_timed_transcript(TimedString(heard.get("word", heard.get("text")) + " ",
                                                                     start_time=heard["start"], end_time=heard["end"]))
            elif event["type"] == "done":
                return
            elif event["type"] == "error":
                error = event["error"]
                raise APIError(f"omnivoice: {error['message']}", body=error,
                               retryable=error.get("type") != "invalid_request_error")
