"""The HTTP layer: OpenAI's speech API (request shape, SSE events, error envelope) over a Synthesizer.

Every error leaves as {"error": {"message", "type", "param", "code"}} with its status: 400 bad input
(a runtime UserError's one line becomes the message), 401 wrong or missing key, 403 a web page that may
not call (its Origin, or without a key a Host name: codes/serve/origins.py), 404 no such voice or
route, 409 a voice name taken or too many voices, 413 a body past its limit, 429 queue full or too many
requests, 503 loading, shutting down or the engine stopped, 504 no audio within the request timeout.
A failure after the first audio ends the stream as an error the client sees (an SSE `error` event,
or an aborted transfer), never as a clean end. The event loop only routes: reading clips, loading and
saving voices and encoding audio run in executors (codes/serve/limits.py has every limit).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hmac
import json
import logging
import time
from pathlib import Path

import numpy as np
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from codes.common.errors import UserError
from codes.runtime.engine import EngineDown, QueueFull
from codes.runtime.specs import SAMPLE_RATE
from codes.serve.encode import CONTENT_TYPES, StreamEncoder
from codes.serve.origins import refusal
from codes.serve.service import (MODEL_IDS, RequestError, ServerState, SpeechParams, open_speech, parse_speech,
                                 save_voice, too_busy)
from codes.serve.speech import SpeechJob, StreamFailed, Synthesizer
from codes.serve.voices import DESIGN_VOICES, voice_id

logger = logging.getLogger("omnivoice.serve")

STREAM_HEADERS = {"X-Accel-Buffering": "no", "Cache-Control": "no-cache"}
REPLICA_HEADER = "x-omnivoice-replica"


def envelope(status: int, message: str, param=None, code=None, kind="invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status)


# --- the app ---------------------------------------------------------------------------------------

def _too_large(limit: int, flag: str) -> JSONResponse:
    return envelope(413, f"the request body is over {limit} bytes; send less, or start the server with a larger "
                         f"{flag}", code="body_too_large")


def _key_matches(scope, key: str) -> bool:
    """Compared as bytes: a client sends a non-ASCII key as its UTF-8, and the header's latin-1 text
    re-encoded as UTF-8 never matched it."""
    given = dict(scope.get("headers") or []).get(b"authorization", b"")
    token = given[7:] if given[:7].lower() == b"bearer " else b""
    return hmac.compare_digest(token, key.encode("utf-8", "surrogateescape"))  # a flag of raw bytes: those bytes


def _guard(app, state: ServerState, mounted=None):
    """ASGI middleware around every request (plain ASGI: Starlette's BaseHTTPMiddleware would turn a
    stream that fails into a clean end):
    - every path but /health refuses a web page that may not call it (403, codes/serve/origins.py);
    - with --api-key, /v1/* and the mounted door's paths (/mcp) need 'Authorization: Bearer KEY' (401);
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
        if scope["path"] != "/health":
            refused = refusal(dict(scope.get("headers") or []), state.config.browsers, keyed=bool(key))
            if refused is not None:
                return await envelope(403, refused[1], code=refused[0], kind="permission_error")(scope, receive, send)
        guarded = scope["path"].startswith("/v1/") or (mounted is not None and mounted.handles(scope["path"]))
        if key and guarded and not _key_matches(scope, key):
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
        target = mounted.app if mounted is not None and mounted.handles(scope["path"]) else app
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

        return await target(scope, counted, replaced)

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


def create_app(state: ServerState, doors=()):
    """The HTTP API as an ASGI app. `doors` run with it (each an async context manager `running()`,
    e.g. the Wyoming server); one with `handles(path)` and `app` (MCP) serves its paths, behind the
    same key and body limits."""

    @contextlib.asynccontextmanager
    async def lifespan(_):
        async with contextlib.AsyncExitStack() as stack:
            for door in doors:
                await stack.enter_async_context(door.running())
            yield

    app = FastAPI(title="omnivoice-onnx", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.omnivoice = state
    limits = state.config.limits

    @app.exception_handler(RequestError)
    async def _api_error(_, exc: RequestError):
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

    @app.get("/v1/audio/models")
    async def audio_models():  # Open WebUI lists its TTS models from here
        return {"models": [{"id": m} for m in MODEL_IDS]}

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
            raise RequestError(400, "send the reference clip as the multipart file field 'file'", "file")
        transcript = form.get("text") or form.get("ref_text")
        if not isinstance(transcript, str) or not transcript.strip():
            raise RequestError(400, "send the clip's transcript as the field 'text'", "text")
        name = form.get("name") or getattr(upload, "filename", None) or ""
        vid = voice_id(Path(str(name)[:256]).stem if not form.get("name") else str(name)[:256])
        await save_voice(state, synth, upload.read, transcript, vid)
        return {"id": vid, "name": vid}

    @app.delete("/v1/audio/voices/{vid}")
    async def delete_voice(vid: str):
        if vid in DESIGN_VOICES:
            raise RequestError(400, f"{vid!r} is a built-in voice and cannot be deleted", "voice")
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, state.voices.book.delete, vid):
            unknown = await loop.run_in_executor(None, state.voices.book.unknown_voice, vid[:64])
            raise RequestError(404, str(unknown), "voice", "voice_not_found")
        return {"id": vid, "deleted": True}

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        synth = state.ready()
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RequestError(400, "the request body is not valid JSON") from None
        params = parse_speech(body, state.config)
        if state.in_flight > limits.max_concurrent:  # this request is counted already (_guard)
            raise too_busy(limits)
        return await _speak(state, synth, request, params)

    return _guard(app, state, next((door for door in doors if hasattr(door, "handles")), None))


async def _speak(state: ServerState, synth: Synthesizer, request: Request, params: SpeechParams):
    """The request's first audio, then a response that streams the rest (and frees its place when done)."""
    limits = state.config.limits
    received_at = time.perf_counter()
    job_box: list[SpeechJob] = request.scope.setdefault("omnivoice_jobs", [])

    async def prepare():
        job = await open_speech(state, synth, params, "http", received_at, job_box)
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
            raise RequestError(500 if exc.server_side else 400, str(exc), code="generation_failed",
                               kind="server_error" if exc.server_side else "invalid_request_error") from None
    task.cancel()
    job = job_box[0] if job_box else None
    if job is not None:
        job.cancel()
        job.status = "disconnected" if watcher in done else "timeout"
        job.finish()
    if watcher in done:
        raise RequestError(499, "client closed the request", code="client_closed")
    raise RequestError(504, f"no audio within the request timeout ({timeout:g} s); retry with shorter input or fewer "
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
