"""The service every door opens onto (HTTP in app.py, Wyoming in wyoming.py, MCP in mcp.py): one
Synthesizer, the voices and the limits; a speech request's fields checked once; a request turned
into a SpeechJob the same way whoever asked, so requests from all doors share decoding steps.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.runtime import audio
from codes.runtime.chunks import TextStream, stream_chunks
from codes.runtime.engine import QueueFull
from codes.runtime.settings import GenerationSettings
from codes.serve.encode import check_format
from codes.serve.limits import Limits, excerpt, flag
from codes.serve.origins import BrowserRules
from codes.serve.speech import SpeechJob, Synthesizer, settle_sentences
from codes.serve.voices import DESIGN_VOICES, TooManyVoices, UnknownVoice, VoiceExists, Voices

MODEL_IDS = ("omnivoice", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # OpenAI's names are accepted as aliases
MAX_STEPS = 256
SPEED_RANGE = (0.25, 4.0)
MAX_DURATION = 3600.0  # seconds: a bound for `duration`, far past any speech request
MAX_SETTING = 1e6  # |value| of a float setting: finite is not enough, 1e308 overflows the maths
SETTING_FIELDS = ("num_steps", "guidance_scale", "t_shift", "layer_penalty_factor", "position_temperature",
                  "class_temperature")
SPEECH_FIELDS = {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format",
                 "language", "duration", "seed", "stream", "user", *SETTING_FIELDS}
logger = logging.getLogger("omnivoice.serve")


class RequestError(Exception):
    """A request refused or failed, with what every door needs to say so: HTTP answers `status`
    with OpenAI's envelope (message, type=`kind`, param, code); Wyoming and MCP send the message."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind


@dataclass
class ServerConfig:
    voices_dir: Path
    api_key: str | None = None
    limits: Limits = field(default_factory=Limits)
    settings: GenerationSettings = field(default_factory=GenerationSettings)  # what a request leaves out
    replica: str | None = None  # a Ray Serve replica's NAME/PID: sent as a response header and in the request log
    browsers: BrowserRules = field(default_factory=BrowserRules)  # which web pages may call (--allow-origin/-host)


@dataclass
class ServerState:
    config: ServerConfig
    voices: Voices
    synth: Synthesizer | None = None  # None until the model is loaded, warmed and its preloads pinned
    request_ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    in_flight: int = 0  # requests between admission and their last byte
    draining: bool = False  # SIGTERM came: no new work, running requests finish

    def unavailable(self) -> RequestError | None:
        """Why the server takes no work now (a 503, for /health and every request alike), or None."""
        if self.draining:
            return RequestError(503, "the server is shutting down; retry on another", code="shutting_down",
                                kind="server_error")
        if self.synth is None:
            return RequestError(503, "the model is still loading; retry shortly", code="model_not_ready",
                                kind="server_error")
        if self.synth.engine.dead:
            return RequestError(503, "the decoding engine has stopped; restart the server", code="engine_down",
                                kind="server_error")
        return None

    def admit(self) -> Synthesizer:
        """A request from a door that does not count its own (Wyoming, MCP): in flight until
        release(); 503 or 429 (past --max-concurrent) before any work."""
        synth = self.ready()
        if self.in_flight >= self.config.limits.max_concurrent:
            raise too_busy(self.config.limits)
        self.in_flight += 1
        return synth

    def release(self) -> None:
        self.in_flight -= 1

    def ready(self) -> Synthesizer:
        error = self.unavailable()
        if error is not None:
            raise error
        return self.synth


# --- request parsing -------------------------------------------------------------------------------

def _number(body: dict, name: str, whole: bool = False):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not isinstance(value, int)):
        shown = excerpt(value) if isinstance(value, str) else excerpt(repr(value))
        raise RequestError(400, f"{name} must be {'a whole number' if whole else 'a number'}, got {shown}", name)
    if not math.isfinite(value):
        raise RequestError(400, f"{name} must be finite, got {value!r}", name)
    return value


def _text(body: dict, name: str, required: bool = False, limit: int | None = None) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        got = "" if value is None else f", got {type(value).__name__}"
        raise RequestError(400, f"{name} must be a string{got}", name)
    if limit is not None and len(value) > limit:
        raise RequestError(400, f"{name} is {len(value)} characters ({excerpt(value)}); the limit is {limit}", name)
    return value


@dataclass
class SpeechParams:
    text: str
    voice: str
    instructions: str | None
    response_format: str
    stream_format: str
    speed: float | None
    language: str | None
    duration: float | None
    seed: int | None
    settings: GenerationSettings


def parse_speech(body, config: ServerConfig, streamed_text: bool = False) -> SpeechParams:
    """A speech request's fields (OpenAI's names, and ours) checked against the limits, over the
    server's generation settings; every door builds its requests through this. With `streamed_text`
    the text comes later (TextSpeech.push)."""
    limits = config.limits
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    unknown = sorted(set(body) - SPEECH_FIELDS)
    if unknown:
        names = ", ".join(excerpt(str(name)) for name in unknown[:5])
        raise RequestError(400, f"unknown field(s): {names}; known: {', '.join(sorted(SPEECH_FIELDS))}",
                           str(unknown[0])[:64])
    _text(body, "model", limit=64)
    text = "" if streamed_text else _text(body, "input", required=True, limit=limits.max_input_chars)
    if not streamed_text and not text.strip():
        raise RequestError(400, "input is empty; give at least one word to speak", "input")
    voice = body.get("voice")
    if isinstance(voice, dict):
        voice = voice.get("id")
    if not isinstance(voice, str) or not voice:
        raise RequestError(400, "voice is required: a built-in name (alloy, ash, ...) or a saved voice's id", "voice")
    if len(voice) > 64:
        raise RequestError(404, f"unknown voice {excerpt(voice)}: voice ids are at most 64 characters", "voice",
                           "voice_not_found")
    instructions = _text(body, "instructions", limit=limits.max_instructions_chars)
    language = _text(body, "language", limit=limits.max_language_chars)
    response_format = _text(body, "response_format", limit=16) or "mp3"
    try:
        check_format(response_format)
    except UserError as exc:
        raise RequestError(400, str(exc), "response_format") from None
    stream_format = _text(body, "stream_format", limit=16) or "audio"
    if stream_format not in ("audio", "sse"):
        raise RequestError(400, f"stream_format must be 'audio' or 'sse', got {stream_format!r}", "stream_format")
    speed = _number(body, "speed")
    if speed is not None and not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
        raise RequestError(400, f"speed must be between {SPEED_RANGE[0]} and {SPEED_RANGE[1]}, got {speed}", "speed")
    num_steps = _number(body, "num_steps", whole=True)
    if num_steps is not None and not 1 <= num_steps <= MAX_STEPS:
        raise RequestError(400, f"num_steps must be between 1 and {MAX_STEPS}, got {num_steps}", "num_steps")
    changes = {name: _number(body, name, whole=name == "num_steps") for name in SETTING_FIELDS}
    for name, value in changes.items():
        if value is not None and abs(value) > MAX_SETTING:
            raise RequestError(400, f"{name} must be within ±{MAX_SETTING:g}, got {value:g}", name)
    try:
        settings = config.settings.replace(**{k: v for k, v in changes.items() if v is not None})
    except UserError as exc:
        raise RequestError(400, str(exc), next((n for n in SETTING_FIELDS if str(exc).startswith(n)), None)) from None
    duration = _number(body, "duration")
    if duration is not None and not 0 < duration <= MAX_DURATION:
        raise RequestError(400, f"duration must be > 0 and at most {MAX_DURATION:g} seconds, got {duration:g}",
                           "duration")
    seed = _number(body, "seed", whole=True)
    if seed is not None and not 0 <= seed < 2**63:
        raise RequestError(400, f"seed must be between 0 and 2**63 - 1, got {seed}", "seed")
    return SpeechParams(text, voice, instructions, response_format, stream_format,
                        None if speed is None or speed == 1.0 else float(speed), language, duration, seed, settings)


# --- voices ---------------------------------------------------------------------------------------

async def resolve_voice(state: ServerState, synth: Synthesizer, name: str, instructions: str | None, text: str):
    try:
        return await state.voices.resolve(synth, name, instructions, text)
    except UnknownVoice as exc:
        raise RequestError(404, str(exc), "voice", "voice_not_found") from None
    except QueueFull:
        raise
    except UserError as exc:
        if name in DESIGN_VOICES:
            raise RequestError(400, str(exc), "instructions") from None
        raise RequestError(400, str(exc), "voice", "voice_unreadable") from None



def read_clip(data: bytes, limits: Limits) -> tuple[np.ndarray, int]:
    """An uploaded clip -> (mono float32, rate), its length refused from its header before decoding
    (codes/runtime/audio.py read_clip), so a small file that unpacks to gigabytes is never unpacked."""
    try:
        return audio.read_clip(data, limits.max_ref_seconds_upload)
    except audio.ClipTooLong as exc:
        raise RequestError(400, f"the clip is {exc.length}; the limit is {exc.limit:g} s ({flag('max_ref_seconds_upload')}; "
                                "a clone prompt needs only a few seconds): trim it", "file", "clip_too_long") from None
    except UserError as exc:
        raise RequestError(400, str(exc), "file", "unreadable_audio") from None


async def save_voice(state: ServerState, synth: Synthesizer, read, transcript: str, vid: str) -> None:
    """A saved voice from a reference clip (`await read()` gives its bytes, read only once the name
    and the count are known to be free) and its transcript; RequestError for what the limits refuse."""
    limits = state.config.limits
    if len(transcript) > limits.max_transcript_chars:
        raise RequestError(400, f"the transcript is {len(transcript)} characters; the limit is "
                                f"{limits.max_transcript_chars}", "text", "transcript_too_long")
    loop = asyncio.get_running_loop()
    book = state.voices.book
    if await loop.run_in_executor(None, book.saved_path, vid) is not None:  # before any decoding
        raise _voice_exists(vid)
    if len(await loop.run_in_executor(None, book.saved_ids)) >= limits.max_voices:
        raise _too_many_voices(limits)
    wav, rate = await loop.run_in_executor(None, read_clip, await read(), limits)
    voice = await loop.run_in_executor(synth.decode_pool, synth.tts.create_voice, (wav, rate), transcript)
    try:  # counted again under the folder's lock: uploads that were decoded at once all passed the count above
        await loop.run_in_executor(None, book.save, vid, voice, limits.max_voices)
    except VoiceExists:
        raise _voice_exists(vid) from None
    except TooManyVoices:
        raise _too_many_voices(limits) from None
    logger.info("saved voice %s (%d frames)", vid, voice.codes.shape[1])


def _voice_exists(vid: str) -> RequestError:
    return RequestError(409, f"voice {vid!r} exists; delete it first (DELETE /v1/audio/voices/{vid})", "name",
                        "voice_exists")


def _too_many_voices(limits: Limits) -> RequestError:
    return RequestError(409, f"{limits.max_voices} voices are saved, the most --max-voices allows; delete one first",
                        "name", "too_many_voices")


def too_busy(limits: Limits) -> RequestError:
    return RequestError(429, f"the server is busy ({limits.max_concurrent} requests in flight); retry shortly",
                        code="rate_limit_exceeded", kind="rate_limit_error")


async def open_speech(state: ServerState, synth: Synthesizer, params: SpeechParams, door: str,
                      received_at: float | None = None, job_box: list | None = None) -> SpeechJob:
    """A request's chunks, voice and first submission: a started SpeechJob. RequestError (400, 404),
    QueueFull (429) or StreamFailed before any audio; `job_box` gets the job as soon as it exists."""
    received_at = time.perf_counter() if received_at is None else received_at
    chunks = stream_chunks(params.text)
    if not chunks:
        raise RequestError(400, "input has nothing to speak", "input")
    voice, instruct = await resolve_voice(state, synth, params.voice, params.instructions, params.text)
    requests = settle_sentences(synth.tts, chunks, params.language, instruct, voice, params.duration,
                                params.speed, params.settings)
    job = SpeechJob(synth, requests, params.settings, params.seed, voice.rms if voice else None, len(params.text),
                    received_at, deadline=received_at + state.config.limits.max_request_seconds,
                    request_id=next(state.request_ids), door=door, replica=state.config.replica)
    job.start()  # QueueFull here is the request's 429, before it is a job that logs
    if job_box is not None:
        job_box.append(job)
    return job


class TextSpeech:
    """A request whose text arrives in pieces (an LLM's reply, Wyoming's synthesize-chunk): each
    sentence joins the job as soon as it is complete (codes/runtime/chunks.py TextStream), so the
    first is spoken while later text is still coming. Text that comes while the voice is still being
    resolved (a design voice pinning) waits for it."""

    def __init__(self, state: ServerState, synth: Synthesizer, params: SpeechParams, door: str):
        self.state, self.synth, self.params = state, synth, params
        self.text = TextStream()
        self.chars = 0
        self.voice = self.instruct = None
        self.opened = self.closing = False
        self.held: list[tuple[list[str], int]] = []  # chunks that came before the voice
        received_at = time.perf_counter()
        self.job = SpeechJob(synth, [], params.settings, params.seed, None, 0, received_at,
                             deadline=received_at + state.config.limits.max_request_seconds,
                             request_id=next(state.request_ids), door=door, replica=state.config.replica,
                             closed=False)

    async def open(self) -> None:
        """Resolve the voice (pinning a design voice if need be), then queue what came meanwhile."""
        self.voice, self.instruct = await resolve_voice(self.state, self.synth, self.params.voice,
                                                        self.params.instructions, self.params.text)
        self.job.ref_rms = self.voice.rms if self.voice else None
        self.opened = True
        for chunks, chars in self.held:
            self._add(chunks, chars)
        self.held = []
        if self.closing:
            self.job.close()

    def push(self, text: str) -> None:
        limit = self.state.config.limits.max_input_chars
        if self.chars + len(text) > limit:
            raise RequestError(400, f"the text is over {limit} characters, the most --max-input-chars allows",
                               "input")
        self.chars += len(text)
        self._add(self.text.push(text), len(text))

    def close(self) -> None:
        self._add(self.text.flush(), 0)
        self.closing = True
        if self.opened:
            self.job.close()

    def _add(self, chunks: list[str], chars: int) -> None:
        if not self.opened:
            self.held.append((chunks, chars))
        elif chunks:
            requests = settle_sentences(self.synth.tts, chunks, self.params.language, self.instruct, self.voice,
                                        None, self.params.speed, self.params.settings)
            self.job.extend(requests, chars)
        else:
            self.job.chars += chars
