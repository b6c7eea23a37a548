"""The HTTP layer: OpenAI's speech API (request shape, SSE events, error envelope) over a Synthesizer.

Every error leaves as {"error": {"message", "type", "param", "code"}} with its status: 400 bad input
(a runtime UserError's one line becomes the message), 401 wrong or missing key, 404 no such voice or
route, 409 a voice name taken or too many voices, 413 a body past its limit, 429 queue full or too many
requests, 503 loading, shutting down or the engine stopped, 504 no audio within the request timeout.
A failure after the first audio ends the stream as an error the client sees (an SSE `error` event,
or an aborted transfer), never as a clean end. The event loop only routes: reading clips, loading and
saving voices and encoding audio run in executors (codes/serve/limits.py has every limit).
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
from codes.runtime.engine import EngineDown, QueueFull
from codes.runtime.settings import GenerationSettings
from codes.runtime.specs import SAMPLE_RATE
from codes.serve.encode import CONTENT_TYPES, StreamEncoder, check_format
from codes.serve.limits import Limits, excerpt
from codes.serve.speech import SpeechJob, StreamFailed, Synthesizer, settle_sentences
from codes.serve.voices import DESIGN_VOICES, UnknownVoice, Voices, voice_id

logger = logging.getLogger("omnivoice.serve")

MODEL_IDS = ("omnivoice", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # OpenAI's names are accepted as aliases
MAX_STEPS = 256
SPEED_RANGE = (0.25, 4.0)
MAX_DURATION = 3600.0  # seconds: a bound for `duration`, far past any speech request
MAX_SETTING = 1e6  # |value| of a float setting: finite is not enough, 1e308 overflows the maths
SETTING_FIELDS = ("num_steps", "guidance_scale", "t_shift", "layer_penalty_factor", "position_temperature",
                  "class_temperature")
SPEECH_FIELDS = {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format",
                 "language", "duration", "seed", "stream", "user", *SETTING_FIELDS}
DEFAULT_SETTINGS = GenerationSettings()
STREAM_HEADERS = {"X-Accel-Buffering": "no", "Cache-Control": "no-cache"}
REPLICA_HEADER = "x-omnivoice-replica"


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
    limits: Limits = field(default_factory=Limits)
    replica: str | None = None  # a Ray Serve replica's NAME/PID: sent as REPLICA_HEADER and in the request log


@dataclass
class ServerState:
    config: ServerConfig
    voices: Voices
    synth: Synthesizer | None = None  # None until the model is loaded, warmed and its preloads pinned
    request_ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    in_flight: int = 0  # requests between admission and their last byte
    draining: bool = False  # SIGTERM came: no new work, running requests finish

    def unavailable(self) -> ApiError | None:
        """Why the server takes no work now (a 503, for /health and every request alike), or None."""
        if self.draining:
            return ApiError(503, "the server is shutting down; retry on another", code="shutting_down",
                            kind="server_error")
        if self.synth is None:
            return ApiError(503, "the model is still loading; retry shortly", code="model_not_ready",
                            kind="server_error")
        if self.synth.engine.dead:
            return ApiError(503, "the decoding engine has stopped; restart the server", code="engine_down",
                            kind="server_error")
        return None

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
        raise ApiError(400, f"{name} must be {'a whole number' if whole else 'a number'}, got {shown}", name)
    if not math.isfinite(value):
        raise ApiError(400, f"{name} must be finite, got {value!r}", name)
    return value


def _text(body: dict, name: str, required: bool = False, limit: int | None = None) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        raise ApiError(400, f"{name} must be a string" + ("" if value is None else f", got {type(value).__name__}"), name)
    if limit is not None and len(value) > limit:
        raise ApiError(400, f"{name} is {len(value)} characters ({excerpt(value)}); the limit is {limit}", name)
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


def parse_speech(body, limits: Limits) -> SpeechParams:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    unknown = sorted(set(body) - SPEECH_FIELDS)
    if unknown:
        names = ", ".join(excerpt(str(name)) for name in unknown[:5])
        raise ApiError(400, f"unknown field(s): {names}; known: {', '.join(sorted(SPEECH_FIELDS))}",
                       str(unknown[0])[:64])
    _text(body, "model", limit=64)
    text = _text(body, "input", required=True, limit=limits.max_input_chars)
    if not text.strip():
        raise ApiError(400, "input is empty; give at least one word to speak", "input")
    voice = body.get("voice")
    if isinstance(voice, dict):
        voice = voice.get("id")
    if not isinstance(voice, str) or not voice:
        raise ApiError(400, "voice is required: a built-in name (alloy, ash, ...) or a saved voice's id", "voice")
    if len(voice) > 64:
        raise ApiError(404, f"unknown voice {excerpt(voice)}: voice ids are at most 64 characters", "voice",
                       "voice_not_found")
    instructions = _text(body, "instructions", limit=limits.max_instructions_chars)
    language = _text(body, "language", limit=limits.max_language_chars)
    response_format = _text(body, "response_format", limit=16) or "mp3"
    try:
        check_format(response_format)
    except UserError as exc:
        raise ApiError(400, str(exc), "response_format") from None
    stream_format = _text(body, "stream_format", limit=16) or "audio"
    if stream_format not in ("audio", "sse"):
        raise ApiError(400, f"stream_format must be 'audio' or 'sse', got {stream_format!r}", "stream_format")
    speed = _number(body, "speed")
    if speed is not None and not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
        raise ApiError(400, f"speed must be between {SPEED_RANGE[0]} and {SPEED_RANGE[1]}, got {speed}", "speed")
    num_steps = _number(body, "num_steps", whole=True)
    if num_steps is not None and not 1 <= num_steps <= MAX_STEPS:
        raise ApiError(400, f"num_steps must be between 1 and {MAX_STEPS}, got {num_steps}", "num_steps")
    changes = {name: _number(body, name, whole=name == "num_steps") for name in SETTING_FIELDS}
    for name, value in changes.items():
        if value is not None and abs(value) > MAX_SETTING:
            raise ApiError(400, f"{name} must be within ±{MAX_SETTING:g}, got {value:g}", name)
    try:
        settings = DEFAULT_SETTINGS.replace(**{k: v for k, v in changes.items() if v is not None})
    except UserError as exc:
        raise ApiError(400, str(exc), next((n for n in SETTING_FIELDS if str(exc).startswith(n)), None)) from None
    duration = _number(body, "duration")
    if duration is not None and not 0 < duration <= MAX_DURATION:
        raise ApiError(400, f"duration must be > 0 and at most {MAX_DURATION:g} seconds, got {duration:g}", "duration")
    seed = _number(body, "seed", whole=True)
    if seed is not None and not 0 <= seed < 2**63:
        raise ApiError(400, f"seed must be between 0 and 2**63 - 1, got {seed}", "seed")
    return SpeechParams(text, voice, instructions, response_format, stream_format,
                        None if speed is None or speed == 1.0 else float(speed), language, duration, seed, settings)


# --- voices ---------------------------------------------------------------------------------------

async def resolve_voice(state: ServerState, synth: Synthesizer, name: str, instructions: str | None, text: str):
    try:
        return await state.voices.resolve(synth, name, instructions, text)
    except UnknownVoice as exc:
        raise ApiError(404, str(exc), "voice", "voice_not_found") from None
    except QueueFull:
        raise
    except UserError as exc:
        if name in DESIGN_VOICES:
            raise ApiError(400, str(exc), "instructions") from None
        raise ApiError(400, str(exc), "voice", "voice_unreadable") from None


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

def _too_large(limit: int, flag: str) -> JSONResponse:
    return envelope(413, f"the request body is over {limit} bytes; send less, or start the server with a larger "
                         f"{flag}", code="body_too_large")


def _key_matches(scope, key: str) -> bool:
    given = dict(scope.get("headers") or []).get(b"authorization", b"").decode("latin-1")
    token = given[7:] if given.lower().startswith("bearer ") else ""
    return hmac.compare_digest(token.encode(), key.encode())


def _guard(app, state: ServerState):
    """ASGI middleware around every request (plain ASGI: Starlette's BaseHTTPMiddleware would turn a
    stream that fails into a clean end):
    - with --api-key, /v1/* needs 'Authorization: Bearer KEY' (401);
    - a body past its limit is refused before it is read (by its Content-Length) or while it is
      (counted as it arrives), so no route ever holds more than the limit;
    - a speech request counts as in flight until its response has ended however it ends, and its
      work items are cancelled then (a response whose body never started streaming included)."""

    async def middleware(scope, receive, send):
        if scope["type"] != "http":
            return await app(scope, receive, send)
        if state.config.replica:
            send = _named(send, state.config.replica)
        key = state.config.api_key
        if key and scope["path"].startswith("/v1/") and not _key_matches(scope, key):
            return await envelope(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                                  code="invalid_api_key")(scope, receive, send)
        if scope["path"] == "/v1/audio/speech":
            state.in_flight += 1
            try:
                return await _limited(scope, receive, send)
            finally:
                state.in_flight -= 1
                for job in scope.get("omnivoice_jobs", []):
                    job.cancel()
                    job.finish()
        return await _limited(scope, receive, send)

    async def _limited(scope, receive, send):
        limits = state.config.limits
        upload = scope["path"] == "/v1/audio/voices"
        limit, flag = ((limits.max_upload_bytes, "--max-upload-bytes") if upload
                       else (limits.max_body_bytes, "--max-body-bytes"))
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _drain(receive)
            return await _too_large(limit, flag)(scope, receive, send)
        seen, cut = 0, False

        async def counted():
            nonlocal seen, cut
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > limit and not cut:  # the app reads the body as ended here, and its answer is replaced
                cut = True
                if message.get("more_body"):
                    await _drain(receive)
                return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def replaced(message):
            if not cut:
                return await send(message)
            if message["type"] == "http.response.start":  # the app's answer to a cut body: a 413 instead
                await _too_large(limit, flag)(scope, receive, send)

        return await app(scope, counted, replaced)

    return middleware


def _named(send, replica: str):
    """`send` with the replica's name on every response's headers."""
    header = (REPLICA_HEADER.encode(), replica.encode("latin-1"))

    async def named(message):
        if message["type"] == "http.response.start":
            message = {**message, "headers": [*message.get("headers", []), header]}
        await send(message)

    return named


async def _drain(receive, cap: int = 64 << 20) -> None:
    """Read and drop the rest of a refused body (up to `cap`), so the client reads the 413 rather than
    a connection reset while it is still sending."""
    dropped = 0
    while dropped < cap:
        message = await receive()
        dropped += len(message.get("body", b""))
        if message["type"] != "http.request" or not message.get("more_body"):
            return


def create_app(state: ServerState) -> FastAPI:
    app = FastAPI(title="omnivoice-onnx", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.omnivoice = state
    limits = state.config.limits

    @app.exception_handler(ApiError)
    async def _api_error(_, exc: ApiError):
        return envelope(exc.status, exc.message, exc.param, exc.code, exc.kind)

    @app.exception_handler(UserError)
    async def _user_error(_, exc: UserError):
        return envelope(429 if isinstance(exc, QueueFull) else 400, str(exc),
                        code="rate_limit_exceeded" if isinstance(exc, QueueFull) else None,
                        kind="rate_limit_error" if isinstance(exc, QueueFull) else "invalid_request_error")

    @app.exception_handler(EngineDown)
    async def _engine_down(_, exc: EngineDown):
        return envelope(503, f"{exc}; restart the server", code="engine_down", kind="server_error")

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

    @app.get("/health")
    async def health():
        error = state.unavailable()
        if error is not None:
            return envelope(error.status, error.message, code=error.code, kind=error.kind)
        engine = state.synth.engine
        return {"status": "ok", "outstanding_items": len(state.synth.outstanding), "requests_in_flight": state.in_flight,
                "max_batch": engine.max_batch, "max_queue": engine.max_queue}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "omnivoice-onnx"}
                                           for m in MODEL_IDS]}

    @app.get("/v1/audio/voices")
    async def list_voices():
        listing = await asyncio.get_running_loop().run_in_executor(None, state.voices.book.listing)
        return {"voices": listing}

    @app.post("/v1/audio/voices")
    async def add_voice(request: Request):
        synth = state.ready()
        form = await request.form(max_part_size=limits.max_upload_bytes)
        upload = form.get("file") or form.get("audio_sample")
        if upload is None or isinstance(upload, str):
            raise ApiError(400, "send the reference clip as the multipart file field 'file'", "file")
        transcript = form.get("text") or form.get("ref_text")
        if not isinstance(transcript, str) or not transcript.strip():
            raise ApiError(400, "send the clip's transcript as the field 'text'", "text")
        if len(transcript) > limits.max_transcript_chars:
            raise ApiError(400, f"the transcript is {len(transcript)} characters; the limit is "
                                f"{limits.max_transcript_chars}", "text", "transcript_too_long")
        name = form.get("name") or getattr(upload, "filename", None) or ""
        vid = voice_id(Path(str(name)[:256]).stem if not form.get("name") else str(name)[:256])
        loop = asyncio.get_running_loop()
        book = state.voices.book
        if await loop.run_in_executor(None, book.saved_path, vid) is not None:  # before any decoding
            raise ApiError(409, f"voice {vid!r} exists; delete it first (DELETE /v1/audio/voices/{vid})", "name",
                           "voice_exists")
        if len(await loop.run_in_executor(None, book.saved_ids)) >= limits.max_voices:
            raise ApiError(409, f"{limits.max_voices} voices are saved, the most --max-voices allows; delete one first",
                           "name", "too_many_voices")
        wav, rate = await loop.run_in_executor(None, _read_clip, await upload.read())
        seconds = wav.shape[-1] / rate
        if seconds > limits.max_ref_seconds_upload:
            raise ApiError(400, f"the clip is {seconds:.1f} s; the limit is {limits.max_ref_seconds_upload:g} s (a "
                                "clone prompt needs only a few seconds): trim it", "file", "clip_too_long")
        voice = await loop.run_in_executor(synth.decode_pool, synth.tts.create_voice, (wav, rate), transcript)
        await loop.run_in_executor(None, book.save, vid, voice)
        logger.info("saved voice %s (%d frames)", vid, voice.codes.shape[1])
        return {"id": vid, "name": vid}

    @app.delete("/v1/audio/voices/{vid}")
    async def delete_voice(vid: str):
        if vid in DESIGN_VOICES:
            raise ApiError(400, f"{vid!r} is a built-in voice and cannot be deleted", "voice")
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, state.voices.book.delete, vid):
            unknown = await loop.run_in_executor(None, state.voices.book.unknown_voice, vid[:64])
            raise ApiError(404, str(unknown), "voice", "voice_not_found")
        return {"id": vid, "deleted": True}

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        synth = state.ready()
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise ApiError(400, "the request body is not valid JSON") from None
        params = parse_speech(body, limits)
        if state.in_flight > limits.max_concurrent:  # this request is counted already (_guard)
            raise ApiError(429, f"the server is busy ({limits.max_concurrent} requests in flight); retry shortly",
                           code="rate_limit_exceeded", kind="rate_limit_error")
        return await _speak(state, synth, request, params)

    return _guard(app, state)


async def _speak(state: ServerState, synth: Synthesizer, request: Request, params: SpeechParams):
    """The request's first audio, then a response that streams the rest (and frees its place when done)."""
    limits = state.config.limits
    request_id = next(state.request_ids)
    received_at = time.perf_counter()
    job_box: list[SpeechJob] = request.scope.setdefault("omnivoice_jobs", [])

    async def prepare():
        chunks = stream_chunks(params.text)
        if not chunks:
            raise ApiError(400, "input has nothing to speak", "input")
        voice, instruct = await resolve_voice(state, synth, params.voice, params.instructions, params.text)
        requests = settle_sentences(synth.tts, chunks, params.language, instruct, voice, params.duration,
                                    params.speed, params.settings)
        job = SpeechJob(synth, requests, params.settings, params.seed, voice.rms if voice else None,
                        len(params.text), received_at, deadline=received_at + limits.max_request_seconds,
                        request_id=request_id, replica=state.config.replica)
        job.start()  # QueueFull here is the request's 429, before it is a job that logs
        job_box.append(job)
        pieces = job.pieces()
        return job, pieces, await pieces.__anext__()

    job, pieces, first = await _until_first_audio(request, prepare(), limits.request_timeout, job_box)
    body = _encoded(state, job, pieces, first, params)
    if params.stream_format == "sse":
        return StreamingResponse(_sse_body(body, job, params, synth), media_type="text/event-stream",
                                 headers=STREAM_HEADERS)
    return StreamingResponse(body, media_type=CONTENT_TYPES[params.response_format], headers=STREAM_HEADERS)


async def _until_first_audio(request: Request, prepare, timeout: float, job_box: list):
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
        try:
            return task.result()  # raises the request's own error (400, 429, ...)
        except StreamFailed as exc:  # failed before any audio: an ordinary error response
            job = job_box[0] if job_box else None
            if job is not None:
                job.status, job.reason = "error", str(exc)
                job.finish()
            raise ApiError(500 if exc.server_side else 400, str(exc), code="generation_failed",
                           kind="server_error" if exc.server_side else "invalid_request_error") from None
    task.cancel()
    job = job_box[0] if job_box else None
    if job is not None:
        job.cancel()
        job.status = "disconnected" if watcher in done else "timeout"
        job.finish()
    if watcher in done:
        raise ApiError(499, "client closed the request", code="client_closed")
    raise ApiError(504, f"no audio within the request timeout ({timeout:g} s); retry with shorter input or fewer "
                        "steps", code="timeout", kind="server_error")


async def _encoded(state: ServerState, job: SpeechJob, pieces, first: np.ndarray, params: SpeechParams):
    """The response's audio, encoded (in an executor) as each chunk is ready. A client that goes away
    has its rows removed; a failure raises StreamFailed, so the transfer is aborted rather than ended
    cleanly; every request ends with its log line."""
    loop = asyncio.get_running_loop()
    encoder = StreamEncoder(params.response_format, SAMPLE_RATE)
    try:
        try:
            async for wav in _audio(first, pieces):
                chunk = await loop.run_in_executor(job.synth.encode_pool, encoder.push, wav)
                if chunk:  # a FLAC's bytes all come at the end
                    yield chunk
            tail = await loop.run_in_executor(job.synth.encode_pool, encoder.close)
            if tail:
                yield tail
        except StreamFailed as exc:
            job.status, job.reason = "error", str(exc)
            raise
        except Exception as exc:  # an encoder or codec error after the headers
            job.status, job.reason = "error", f"{type(exc).__name__}: {exc}"
            raise StreamFailed(job.reason, server_side=True) from exc
        except BaseException:
            job.status = "shutdown" if state.draining else "disconnected"
            raise
    finally:
        encoder.abort()
        job.cancel()
        job.finish()


async def _audio(first: np.ndarray, pieces):
    yield first
    async for wav in pieces:
        yield wav


async def _sse_body(body, job: SpeechJob, params: SpeechParams, synth: Synthesizer):
    """OpenAI's SSE events over the encoded audio; a failure is an `error` event, not a `done`."""
    try:
        async for chunk in body:
            event = {"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode("ascii")}
            yield f"data: {json.dumps(event)}\n\n"
    except StreamFailed as exc:
        event = {"type": "error", "error": {"message": str(exc), "type": "server_error" if exc.server_side
                                            else "invalid_request_error", "code": "generation_failed"}}
        yield f"data: {json.dumps(event)}\n\n"
        return
    input_tokens = len(synth.tts.tokenizer.encode(params.text))
    output_tokens = job.output_frames()
    done = {"type": "speech.audio.done", "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                                                    "total_tokens": input_tokens + output_tokens}}
    yield f"data: {json.dumps(done)}\n\n"
