"""OmniVoiceTTSService: Pipecat's WebSocket TTS over an omnivoice-onnx server's stream door.

Each audio context (a reply, or a TTSSpeakFrame) is one utterance on the door (docs/agents.md has the
messages): its text goes as Pipecat aggregates it (a sentence, then `flush` so it is spoken at once; in
token mode the tokens as they come), the reply's end sends `end`, and an interruption sends `cancel`, after
which the connection, still open with the same fields, takes the next reply without a new handshake. Audio
frames become TTSAudioRawFrames of the context, and each `timing` goes to add_word_timestamps as
(word, start) for each of its words where the server timed them (word_timings=True), else as (text, start),
so TTSTextFrames follow the audio word by word or piece by piece. A connection speaks one utterance at a
time: a context that starts while another is still being spoken waits for its `done`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncGenerator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from loguru import logger
from pipecat.frames.frames import ErrorFrame, Frame, TTSAudioRawFrame, TTSStoppedFrame
from pipecat.services.settings import TTSSettings
from pipecat.services.tts_service import WebsocketTTSService
from pipecat.transcriptions.language import Language
from websockets.protocol import State

SAMPLE_RATE = 24000
STREAM_PATH = "/v1/audio/speech/stream"
# A context with no audio for this long is ended by Pipecat; a CPU server's first audio may take seconds.
STOP_FRAME_TIMEOUT_S = 30.0


def stream_url(base_url: str) -> str:
    """The door's ws:// or wss:// address from the server's http(s):// (or ws(s)://) base."""
    parts = urlsplit(base_url.rstrip("/"))
    scheme = {"http": "ws", "https": "wss"}.get(parts.scheme, parts.scheme)
    if scheme not in ("ws", "wss"):
        raise ValueError(f"base_url {base_url!r} is not http(s):// or ws(s)://; e.g. http://127.0.0.1:8000")
    return urlunsplit((scheme, parts.netloc, parts.path.removesuffix("/v1") + STREAM_PATH, "", ""))


class OmniVoiceTTSService(WebsocketTTSService):
    """Text to speech with an omnivoice-onnx server (serve.py), word timestamps and barge-in."""

    def __init__(self, *, base_url: str = "http://127.0.0.1:8000", api_key: str | None = None, voice: str = "alloy",
                 language: Language | str | None = None, instructions: str | None = None, speed: float | None = None,
                 num_steps: int | None = None, seed: int | None = None, word_timings: bool = False, **kwargs):
        """base_url: the server; api_key: its --api-key (default: $OMNIVOICE_API_KEY); voice: a built-in
        name or a saved voice's id; word_timings: each word's own timestamp (the server aligns each piece with
        its recogniser: one pass a piece, so off unless asked), else each piece's; the rest as the speech API's
        fields of the same names."""
        kwargs.setdefault("stop_frame_timeout_s", STOP_FRAME_TIMEOUT_S)
        super().__init__(push_text_frames=False, push_start_frame=True, sample_rate=SAMPLE_RATE,
                         settings=TTSSettings(model="omnivoice", voice=voice, language=language), **kwargs)
        self._url = stream_url(base_url)
        self._api_key = api_key or os.environ.get("OMNIVOICE_API_KEY")
        self._fields = {name: value for name, value in {"instructions": instructions, "speed": speed,
                                                        "num_steps": num_steps, "seed": seed,
                                                        "word_timings": word_timings or None}.items()
                        if value is not None}
        self._receive_task: asyncio.Task | None = None
        self._context_id: str | None = None  # the utterance the connection is speaking
        self._ended = False  # `end` sent for it
        self._cancelling = False  # `cancel` sent, `cancelled` not yet back: what comes meanwhile is stale

    def can_generate_metrics(self) -> bool:
        return True

    def language_to_service_language(self, language: Language) -> str | None:
        return str(language.value).split("-")[0]  # the server takes a language id such as "en"

    # --- the connection --------------------------------------------------------------------------

    def _open(self) -> bool:
        return self._websocket is not None and self._websocket.state is State.OPEN

    def _start_message(self) -> dict[str, Any]:
        start = {"type": "start", "voice": self._settings.voice, **self._fields}
        if self._settings.language:
            start["language"] = self._settings.language
        return start

    async def _connect_websocket(self):
        headers = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        self._websocket = await self._websocket_connect(self._url, additional_headers=headers)
        await self._websocket.send(json.dumps(self._start_message()))
        self._context_id, self._ended, self._cancelling = None, False, False
        self._receive_task = self.create_task(self._receive_messages(), name="omnivoice-receive")
        await self._call_event_handler("on_connected")

    async def _disconnect_websocket(self):
        websocket, self._websocket = self._websocket, None
        if self._receive_task is not None:
            await self.cancel_task(self._receive_task)
            self._receive_task = None
        if websocket is not None:
            with contextlib.suppress(Exception):
                await websocket.close()
            await self._call_event_handler("on_disconnected")

    async def _disconnect(self):
        await super()._disconnect()
        await self._disconnect_websocket()

    async def _update_settings(self, delta: TTSSettings) -> dict[str, Any]:
        changed = await super()._update_settings(delta)
        if changed and self._context_id is None:  # an idle connection carries the old fields: the next opens anew
            await self._disconnect_websocket()
        return changed

    async def _bind(self, context_id: str) -> None:
        """The connection, speaking `context_id`: the one in use if it speaks it already or is idle, else a
        new one once the utterance it speaks has ended."""
        if self._open() and self._context_id not in (None, context_id):
            if not self._ended:
                await self._send({"type": "end"})
                self._ended = True
            if self._receive_task is not None:
                await asyncio.wait({self._receive_task})  # its `done`, then the server closes
        if not self._open():
            await self._connect_websocket()
        if self._context_id != context_id:
            self._context_id, self._ended = context_id, False

    async def _send(self, message: dict[str, Any]) -> None:
        await self._websocket.send(json.dumps(message))

    # --- Pipecat's side --------------------------------------------------------------------------

    async def run_tts(self, text: str, context_id: str) -> AsyncGenerator[Frame | None, None]:
        try:
            await self._bind(context_id)
            await self._send({"type": "text", "text": text})
            if not self._is_streaming_tokens:  # a whole sentence: spoken now, not when the next one begins
                await self._send({"type": "flush"})
            await self.start_tts_usage_metrics(text)
        except Exception as exc:
            yield ErrorFrame(error=f"{self}: cannot send text to {self._url}: {exc}")
            return
        yield None  # the audio comes through _receive_messages

    async def flush_audio(self, context_id: str | None = None):
        """The reply's end: the rest is spoken, then `done`."""
        context_id = context_id or self.get_active_audio_context_id()
        if self._open() and context_id == self._context_id and not self._ended:
            self._ended = True
            await self._send({"type": "end"})

    async def on_audio_context_interrupted(self, context_id: str):
        """Barge-in: the server drops what it has queued and in flight for this utterance at once."""
        await self.stop_all_metrics()
        if self._open() and context_id == self._context_id:
            self._context_id, self._cancelling = None, True
            with contextlib.suppress(Exception):
                await self._send({"type": "cancel"})
        await super().on_audio_context_interrupted(context_id)

    async def _receive_messages(self):
        """Audio, timings and the end of each utterance, until the server closes the connection."""
        websocket = self._websocket
        try:
            async for message in websocket:
                await self._handle_message(message)
        except Exception as exc:
            logger.warning(f"{self}: the stream ended: {exc}")
        finally:
            if self._websocket is websocket:  # the server closed it (after done or an error)
                self._websocket, self._context_id = None, None

    async def _handle_message(self, message: bytes | str) -> None:
        context_id = self._context_id
        if isinstance(message, bytes):
            if not self._cancelling and context_id and self.audio_context_available(context_id):
                await self.append_to_audio_context(context_id, TTSAudioRawFrame(
                    audio=message, sample_rate=SAMPLE_RATE, num_channels=1, context_id=context_id))
            return
        event = json.loads(message)
        kind = event["type"]
        if kind == "cancelled":
            self._cancelling = False
        elif self._cancelling or not context_id:
            return  # the cancelled utterance's last words
        elif kind == "timing":  # a piece of text and when it is heard, measured by the server
            words = event.get("words")  # each word's own time, where the server timed them
            pairs = [(word["word"], word["start"]) for word in words] if words else [(event["text"], event["start"])]
            await self.add_word_timestamps(pairs, context_id)
        elif kind == "done":
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)
        elif kind == "error":
            await self.push_error(error_msg=f"{self}: {event['error']['message']}")
            await self.append_to_audio_context(context_id, TTSStoppedFrame(context_id=context_id))
            await self.remove_audio_context(context_id)
