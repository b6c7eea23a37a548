"""The HTTP layer: OpenAI's speech API (request shape, SSE events, error envelope) over a Synthesizer.

Every error leaves as {"error": {"message", "type", "param", "code"}} with its status: 400 bad input
(a runtime UserError's one line becomes the message), 401 wrong or missing key, 404 no such voice or
route, 429 queue full, 503 model still loading, 504 no audio within the request timeout.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import io
import itertools
import json
import logging
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from codes.common.errors import UserError
from codes.runtime.chunks import stream_chunks
from codes.runtime.engine import QueueFull
from codes.runtime.settings import GenerationSettings
from codes.runtime.specs import SAMPLE_RATE
from codes.serve.encode import CONTENT_TYPES, StreamEncoder, check_format
from codes.serve.speech import SpeechJob, Synthesizer, settle_sentences
from codes.serve.voices import DESIGN_VOICES, Voices, voice_id

logger = logging.getLogger("omnivoice.serve")

MODEL_IDS = ("omnivoice", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # OpenAI's names are accepted as aliases
MAX_STEPS = 256
SPEED_RANGE = (0.25, 4.0)
SETTING_FIELDS = ("num_steps", "guidance_scale", "t_shift", "layer_penalty_factor", "position_temperature",
                  "class_temperature")
SPEECH_FIELDS = {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format",
                 "language", "duration", "seed", "stream", "user", *SETTING_FIELDS}
DEFAULT_SETTINGS = GenerationSettings()
STREAM_HEADERS = {"X-Accel-Buffering": "no", "Cache-Control": "no-cache"}


class ApiError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind


def envelope(status: int, message: str, param=None, code=None, kind="invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status)


@dataclass
class ServerConfig:
    voices_dir: Path
    api_key: str | None = None
    max_input_chars: int = 4096
    request_timeout: float = 300.0


@dataclass
class ServerState:
    config: ServerConfig
    voices: Voices
    synth: Synthesizer | None = None  # None until the model is loaded, warmed and its preloads pinned
    request_ids: itertools.count = field(default_factory=lambda: itertools.count(1))

    def ready(self) -> Synthesizer:
        if self.synth is None:
            raise ApiError(503, "the model is still loading; retry shortly", code="model_not_ready", kind="server_error")
        return self.synth


# --- request parsing -------------------------------------------------------------------------------

def _number(body: dict, name: str, whole: bool = False):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not isinstance(value, int)):
        raise ApiError(400, f"{name} must be {'a whole number' if whole else 'a number'}, got {value!r}", name)
    if not math.isfinite(value):
        raise ApiError(400, f"{name} must be finite, got {value!r}", name)
    return value


def _text(body: dict, name: str, required: bool = False) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"{name} must be a string" + ("" if value is None else f", got {type(value).__name__}"), name)
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


def parse_speech(body, max_chars: int) -> SpeechParams:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    unknown = sorted(set(body) - SPEECH_FIELDS)
    if unknown:
        raise ApiError(400, f"unknown field(s): {', '.join(unknown)}; known: {', '.join(sorted(SPEECH_FIELDS))}",
                       unknown[0])
    _text(body, "model")
    text = _text(body, "input", required=True)
    if not text.strip():
        raise ApiError(400, "input is empty; give at least one word to speak", "input")
    if len(text) > max_chars:
        raise ApiError(400, f"input is {len(text)} characters; the limit is {max_chars}", "input")
    voice = body.get("voice")
    if isinstance(voice, dict):
        voice = voice.get("id")
    if not isinstance(voice, str) or not voice:
        raise ApiError(400, "voice is required: a built-in name (alloy, ash, ...) or a saved voice's id", "voice")
    response_format = _text(body, "response_format") or "mp3"
    try:
        check_format(response_format)
    except UserError as exc:
        raise ApiError(400, str(exc), "response_format") from None
    stream_format = _text(body, "stream_format") or "audio"
    if stream_format not in ("audio", "sse"):
        raise ApiError(400, f"stream_format must be 'audio' or 'sse', got {stream_format!r}", "stream_format")
    speed = _number(body, "speed")
    if speed is not None and not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
        raise ApiError(400, f"speed must be between {SPEED_RANGE[0]} and {SPEED_RANGE[1]}, got {speed}", "speed")
    num_steps = _number(body, "num_steps", whole=True)
    if num_steps is not None and not 1 <= num_steps <= MAX_STEPS:
        raise ApiError(400, f"num_steps must be between 1 and {MAX_STEPS}, got {num_steps}", "num_steps")
    changes = {name: _number(body, name, whole=name == "num_steps") for name in SETTING_FIELDS}
    try:
        settings = DEFAULT_SETTINGS.replace(**{k: v for k, v in changes.items() if v is not None})
    except UserError as exc:
        raise ApiError(400, str(exc), next((n for n in SETTING_FIELDS if str(exc).startswith(n)), None)) from None
    duration = _number(body, "duration")
    if duration is not None and not duration > 0:
        raise ApiError(400, f"duration must be > 0 seconds, got {duration}", "duration")
    seed = _number(body, "seed", whole=True)
    if seed is not None and not 0 <= seed < 2**63:
        raise ApiError(400, f"seed must be between 0 and 2**63 - 1, got {seed}", "seed")
    return SpeechParams(text, voice, _text(body, "instructions"), response_format, stream_format,
                        None if speed is None or speed == 1.0 else float(speed), _text(body, "language"),
                        duration, seed, settings)


# --- voices ---------------------------------------------------------------------------------------

async def resolve_voice(state: ServerState, synth: Synthesizer, name: str, instructions: str | None, text: str):
    try:
        return await state.voices.resolve(synth, name, instructions, text)
    except UserError as exc:
        if name in DESIGN_VOICES:
            raise ApiError(400, str(exc), "instructions") from None
        raise ApiError(400, str(exc), "voice", "voice_not_found") from None


def _read_clip(data: bytes) -> tuple[np.ndarray, int]:
    """A reference clip in any format soundfile or PyAV reads -> ([channels, samples] float32, rate)."""
    import soundfile

    try:
        wav, rate = soundfile.read(io.BytesIO(data), dtype="float32", always_2d=True)
        return np.ascontiguousarray(wav.T), int(rate)
    except Exception:  # not a format libsndfile knows: try FFmpeg's demuxers
        pass
    try:
        import av

        with av.open(io.BytesIO(data)) as container:
            stream = container.streams.audio[0]
            resampler = av.AudioResampler(format="fltp", layout="mono", rate=stream.rate)
            pieces = [frame.to_ndarray() for packet in container.decode(stream) for frame in resampler.resample(packet)]
            pieces += [frame.to_ndarray() for frame in resampler.resample(None)]
            if pieces:
                return np.concatenate(pieces, axis=1).astype(np.float32), int(stream.rate)
    except Exception:
        pass
    raise ApiError(400, "cannot read the voice clip; send WAV, FLAC, OGG, MP3 or another common audio file", "file",
                   "unreadable_audio")


# --- the app ---------------------------------------------------------------------------------------

def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="omnivoice-onnx", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.omnivoice = state

    @app.exception_handler(ApiError)
    async def _api_error(_, exc: ApiError):
        return envelope(exc.status, exc.message, exc.param, exc.code, exc.kind)

    @app.exception_handler(UserError)
    async def _user_error(_, exc: UserError):
        return envelope(429 if isinstance(exc, QueueFull) else 400, str(exc),
                        code="rate_limit_exceeded" if isinstance(exc, QueueFull) else None,
                        kind="rate_limit_error" if isinstance(exc, QueueFull) else "invalid_request_error")

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_, exc: StarletteHTTPException):
        return envelope(exc.status_code, str(exc.detail), code="not_found" if exc.status_code == 404 else None)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_, exc: RequestValidationError):
        return envelope(400, f"invalid request: {exc.errors()[0].get('msg', 'bad value')}")

    @app.exception_handler(Exception)
    async def _server_error(_, exc: Exception):
        logger.exception("request failed")
        return envelope(500, f"internal error: {type(exc).__name__}", kind="server_error", code="internal_error")

    @app.middleware("http")
    async def _auth(request: Request, call_next):
        key = state.config.api_key
        if key and request.url.path.startswith("/v1/"):
            given = request.headers.get("authorization", "")
            token = given[7:] if given.lower().startswith("bearer ") else ""
            if not hmac.compare_digest(token.encode(), key.encode()):
                return envelope(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                                code="invalid_api_key")
        return await call_next(request)

    @app.get("/health")
    async def health():
        if state.synth is None:
            return envelope(503, "the model is still loading", code="model_not_ready", kind="server_error")
        engine = state.synth.engine
        return {"status": "ok", "outstanding_items": len(state.synth.outstanding),
                "max_batch": engine.max_batch, "max_queue": engine.max_queue}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "omnivoice-onnx"}
                                           for m in MODEL_IDS]}

    @app.get("/v1/audio/voices")
    async def list_voices():
        return {"voices": state.voices.book.listing()}

    @app.post("/v1/audio/voices")
    async def add_voice(request: Request):
        synth = state.ready()
        form = await request.form()
        upload = form.get("file") or form.get("audio_sample")
        if upload is None or isinstance(upload, str):
            raise ApiError(400, "send the reference clip as the multipart file field 'file'", "file")
        transcript = form.get("text") or form.get("ref_text")
        if not isinstance(transcript, str) or not transcript.strip():
            raise ApiError(400, "send the clip's transcript as the field 'text'", "text")
        name = form.get("name") or getattr(upload, "filename", None) or ""
        vid = voice_id(Path(str(name)).stem if not form.get("name") else str(name))
        wav, rate = _read_clip(await upload.read())
        loop = asyncio.get_running_loop()
        voice = await loop.run_in_executor(synth.decode_pool, synth.tts.create_voice, (wav, rate), transcript)
        state.voices.book.save(vid, voice)
        logger.info("saved voice %s (%d frames)", vid, voice.codes.shape[1])
        return {"id": vid, "name": vid}

    @app.delete("/v1/audio/voices/{vid}")
    async def delete_voice(vid: str):
        if vid in DESIGN_VOICES:
            raise ApiError(400, f"{vid!r} is a built-in voice and cannot be deleted", "voice")
        if not state.voices.book.delete(vid):
            raise ApiError(404, str(state.voices.book.unknown_voice(vid)), "voice", "voice_not_found")
        return {"id": vid, "deleted": True}

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        synth = state.ready()
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ApiError(400, "the request body is not valid JSON") from None
        params = parse_speech(body, state.config.max_input_chars)
        request_id = next(state.request_ids)
        received_at = time.perf_counter()
        job_box: list[SpeechJob] = []

        async def prepare():
            chunks = stream_chunks(params.text)
            if not chunks:
                raise ApiError(400, "input has nothing to speak", "input")
            voice, instruct = await resolve_voice(state, synth, params.voice, params.instructions, params.text)
            requests = settle_sentences(synth.tts, chunks, params.language, instruct, voice, params.duration,
                                        params.speed)
            job = SpeechJob(synth, requests, params.settings, params.seed, voice.rms if voice else None,
                            len(params.text), received_at)
            job_box.append(job)
            job.start()
            pieces = job.pieces()
            return job, pieces, await pieces.__anext__()

        job, pieces, first = await _until_first_audio(request, prepare(), state.config.request_timeout, job_box,
                                                      request_id)
        if params.stream_format == "sse":
            body_iter = _sse_body(job, pieces, first, params, request_id, synth)
            return StreamingResponse(body_iter, media_type="text/event-stream", headers=STREAM_HEADERS)
        body_iter = _encoded(job, pieces, first, params, request_id)
        return StreamingResponse(body_iter, media_type=CONTENT_TYPES[params.response_format], headers=STREAM_HEADERS)

    return app


async def _until_first_audio(request: Request, prepare, timeout: float, job_box: list, request_id: int):
    """Voice, sentences, submission and the first sentence's audio; 504 past the timeout, and a client
    that leaves before then has its items cancelled."""
    task = asyncio.ensure_future(prepare)

    async def watch():
        while not await request.is_disconnected():
            await asyncio.sleep(0.1)

    watcher = asyncio.ensure_future(watch())
    try:
        done, _ = await asyncio.wait({task, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if task in done:
        return task.result()  # raises the request's own error (400, 429, ...)
    task.cancel()
    job = job_box[0] if job_box else None
    if job is not None:
        job.cancel()
        job.status = "disconnected" if watcher in done else "timeout"
        logger.info(job.log_line(request_id))
    if watcher in done:
        raise ApiError(499, "client closed the request", code="client_closed")
    raise ApiError(504, f"no audio within the request timeout ({timeout:g} s); retry with shorter input or fewer "
                        "steps", code="timeout", kind="server_error")


async def _encoded(job: SpeechJob, pieces, first: np.ndarray, params: SpeechParams, request_id: int):
    """The response's audio, encoded as each sentence is ready; a client that goes away has its rows
    removed, and every request ends with its log line."""
    encoder = StreamEncoder(params.response_format, SAMPLE_RATE)
    try:
        chunk = encoder.push(first)
        if chunk:  # a FLAC's bytes all come at the end
            yield chunk
        async for wav in pieces:
            chunk = encoder.push(wav)
            if chunk:
                yield chunk
        tail = encoder.close()
        if tail:
            yield tail
    except BaseException:
        job.status = "disconnected"
        encoder.abort()
        raise
    finally:
        job.cancel()
        logger.info(job.log_line(request_id))


async def _sse_body(job: SpeechJob, pieces, first: np.ndarray, params: SpeechParams, request_id: int,
                    synth: Synthesizer):
    async for chunk in _encoded(job, pieces, first, params, request_id):
        event = {"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode("ascii")}
        yield f"data: {json.dumps(event)}\n\n"
    input_tokens = len(synth.tts.tokenizer.encode(params.text))
    output_tokens = job.output_frames()
    done = {"type": "speech.audio.done", "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                                                    "total_tokens": input_tokens + output_tokens}}
    yield f"data: {json.dumps(done)}\n\n"
