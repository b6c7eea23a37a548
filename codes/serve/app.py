"""The HTTP door: OpenAI's speech API (request shape, SSE events, error envelope) onto the service;
a speech request's life is codes/serve/lifecycle.py's, this module only translates.

Every error leaves as {"error": {"message", "type", "param", "code"}} with its status: 400 bad input
(a runtime UserError's one line becomes the message), 401 wrong or missing key, 403 a web page that may
not call (its Origin, or without a key a Host name: codes/serve/origins.py), 404 no such voice or
route, 408 a body that arrives too slowly, 409 a voice name taken or too many voices, 413 a body past
its limit (a speech request's may add a ref_audio clip's base64 to --max-body-bytes) or a clip past
--max-upload-bytes, 429 queue full or too many requests, 503 loading, shutting down or the engine stopped, 504
no audio within the request timeout.
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
from collections.abc import Sequence
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from codes.common.errors import UserError
from codes.runtime.engine import EngineDown
from codes.runtime.specs import SAMPLE_RATE
from codes.runtime.voice_design import language_choices
from codes.serve.door import Door, MountedDoor
from codes.serve.encode import CONTENT_TYPES, StreamEncoder
from codes.serve.errors import ClientStalled, RequestError, StreamFailed, as_request_error
from codes.serve.lifecycle import Speaking, save_voice
from codes.serve.origins import refusal
from codes.serve.params import MODEL_IDS, SpeechParams, base64_length, parse_speech
from codes.serve.playground import add_playground
from codes.serve.service import ServerState
from codes.serve.speech_socket import add_speech_socket, offered_key
from codes.serve.voices.book import DESIGN_VOICES, voice_id
from codes.serve.voices.files import export_voice, is_voice_file_name

logger = logging.getLogger("omnivoice.serve")
LANGUAGES = language_choices()

SPEECH_PATH = "/v1/audio/speech"
STREAM_HEADERS = {"X-Accel-Buffering": "no", "Cache-Control": "no-cache"}
REPLICA_HEADER = "x-omnivoice-replica"


def envelope(status: int, message: str, param=None, code=None, kind="invalid_request_error") -> JSONResponse:
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status_code=status)


def error_envelope(error: RequestError) -> JSONResponse:
    return envelope(error.status, error.message, error.param, error.code, error.kind)


# --- the app ---------------------------------------------------------------------------------------

def _too_large(limit: int, flag: str) -> JSONResponse:
    return envelope(413, f"the request body is over {limit} bytes; send less, or start the server with a larger "
                         f"{flag}", code="body_too_large")


def _key_matches(scope, key: str) -> bool:
    """Compared as bytes: a client sends a non-ASCII key as its UTF-8, and the header's latin-1 text
    re-encoded as UTF-8 never matched it. A WebSocket from a browser, which cannot set headers, may
    carry it in a subprotocol instead (codes/serve/speech_socket.py)."""
    given = dict(scope.get("headers") or []).get(b"authorization", b"")
    token = given[7:] if given[:7].lower() == b"bearer " else b""
    if scope["type"] == "websocket" and not token:
        token = offered_key(scope) or b""
    return hmac.compare_digest(token, key.encode("utf-8", "surrogateescape"))  # a flag of raw bytes: those bytes


def _guard(app, state: ServerState, mounted=None):
    """ASGI middleware around every request (plain ASGI: Starlette's BaseHTTPMiddleware would turn a
    stream that fails into a clean end):
    - every path but /health refuses a web page that may not call it (403, codes/serve/origins.py);
    - with --api-key, /v1/* and the mounted door's paths (/mcp) need 'Authorization: Bearer KEY' (401);
    - a body past its limit is refused before it is read (by its Content-Length) or while it is
      (counted as it arrives), and one that takes past --body-seconds to arrive gets a 408, so no
      route ever holds more than the limit, or holds it for long;
    - a client that leaves a response unread for --write-seconds is let go;
    - a speech request that is still open when its response ends, however it ends (a response whose
      body never started streaming included), is closed: its lifecycle then frees what it held."""

    async def middleware(scope, receive, send):
        if scope["type"] not in ("http", "websocket"):
            return await app(scope, receive, send)
        if state.config.replica and scope["type"] == "http":
            send = _named(send, state.config.replica)
        key = state.config.api_key
        if scope["path"] != "/health":
            refused = refusal(dict(scope.get("headers") or []), state.config.browsers, keyed=bool(key))
            if refused is not None:
                return await _deny(envelope(403, refused[1], code=refused[0], kind="permission_error"), scope,
                                   receive, send)
        guarded = scope["path"].startswith("/v1/") or (mounted is not None and mounted.handles(scope["path"]))
        if key and guarded and not _key_matches(scope, key):
            return await _deny(envelope(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                                        code="invalid_api_key"), scope, receive, send)
        if scope["type"] == "websocket":  # its own bounds: codes/serve/speech_socket.py
            return await app(scope, receive, send)
        spoken = scope.setdefault("omnivoice_speech", [])  # (Speaking, its response body) per speech request
        try:
            return await _limited(scope, receive, _write_bounded(send, spoken))
        except ClientStalled:  # the connection is closed by the server (uvicorn logs it as incomplete)
            return
        finally:
            for _, body in spoken:
                await body.aclose()

    def _write_bounded(send, spoken):
        seconds = state.config.limits.write_seconds

        async def bounded(message):
            try:
                await asyncio.wait_for(send(message), seconds)
            except asyncio.TimeoutError:
                reason = f"the client read nothing for {seconds:g} s (--write-seconds); closed"
                for speaking, _ in spoken:
                    speaking.end("disconnected", reason)
                raise ClientStalled(reason) from None

        return bounded

    async def _limited(scope, receive, send):
        target = mounted.app if mounted is not None and mounted.handles(scope["path"]) else app
        limits = state.config.limits
        upload = scope["path"] == "/v1/audio/voices"
        limit, flag = ((limits.max_upload_bytes, "--max-upload-bytes") if upload
                       else (limits.max_body_bytes, "--max-body-bytes"))
        if scope["path"] == SPEECH_PATH:  # it may carry a one-off clone's clip (ref_audio), in base64
            limit, flag = limit + base64_length(limits.max_upload_bytes), "--max-body-bytes or --max-upload-bytes"
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _drain(receive)
            return await _too_large(limit, flag)(scope, receive, send)
        seen, cut, whole = 0, None, False  # cut: the answer that replaces the app's once the body was cut short
        deadline = asyncio.get_running_loop().time() + limits.body_seconds

        async def counted():
            nonlocal seen, cut, whole
            if cut is not None or whole:  # after the body: only a disconnect comes, whenever it does
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), deadline - asyncio.get_running_loop().time())
            except asyncio.TimeoutError:
                cut = envelope(408, f"the request body took over {limits.body_seconds:g} s to arrive "
                                    "(--body-seconds); send it at once", code="body_too_slow")
                return {"type": "http.request", "body": b"", "more_body": False}
            seen += len(message.get("body", b""))
            if seen > limit:  # the app reads the body as ended here, and its answer is replaced
                cut = _too_large(limit, flag)
                if message.get("more_body"):
                    await _drain(receive)
                return {"type": "http.request", "body": b"", "more_body": False}
            whole = message["type"] != "http.request" or not message.get("more_body")
            return message

        async def replaced(message):
            if cut is None:
                return await send(message)
            if message["type"] == "http.response.start":  # the app's answer to a cut body: the cut's instead
                await cut(scope, receive, send)

        return await target(scope, counted, replaced)

    return middleware


async def _deny(answer: JSONResponse, scope, receive, send) -> None:
    """A refusal in the API's envelope; for a WebSocket, as the handshake's HTTP answer where the server
    can send one (uvicorn can), else a close before the handshake (the client sees a 403)."""
    if scope["type"] == "http" or "websocket.http.response" in (scope.get("extensions") or {}):
        return await answer(scope, receive, send)
    await send({"type": "websocket.close", "code": 1008})


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


def create_app(state: ServerState, doors: Sequence[Door] = ()):
    """The HTTP API as an ASGI app. `doors` run with it (codes/serve/door.py: each one's `running()`, e.g.
    the Wyoming server); a MountedDoor (MCP) serves its paths, behind the same key and body limits."""

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
    @app.exception_handler(UserError)
    @app.exception_handler(EngineDown)
    @app.exception_handler(StreamFailed)
    async def _refused(_, exc: Exception):
        return error_envelope(as_request_error(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_, exc: StarletteHTTPException):
        return envelope(exc.status_code, str(exc.detail), code="not_found" if exc.status_code == 404 else None)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_, exc: RequestValidationError):
        return envelope(400, f"invalid request: {exc.errors()[0].get('msg', 'bad value')}")

    @app.exception_handler(Exception)
    async def _server_error(_, exc: Exception):
        if isinstance(exc, ClientStalled):  # no fault of the server's: the request's log line says it
            logger.warning("http: letting a client go: %s", exc)
        else:
            logger.exception("request failed")
        return envelope(500, f"internal error: {type(exc).__name__}", kind="server_error", code="internal_error")

    @app.get("/health")
    async def health():
        error = state.unavailable()
        if error is not None:
            return error_envelope(error)
        engine = state.model.engine
        return {"status": "ok", "outstanding_items": len(state.model.outstanding), "requests_in_flight": state.in_flight,
                "max_batch": engine.max_batch, "max_queue": engine.max_queue,
                "voices": state.voices.book.imported_status()}  # imported clips still encoding, in the background

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "omnivoice-onnx"}
                                           for m in MODEL_IDS]}

    @app.get("/v1/audio/models")
    async def audio_models():  # Open WebUI lists its TTS models from here
        return {"models": [{"id": m} for m in MODEL_IDS]}

    @app.get("/v1/audio/languages")
    async def languages():  # the playground's list: every language the model knows, by upstream's display names
        return {"languages": LANGUAGES}

    @app.get("/v1/audio/defaults")
    async def defaults():  # what a speech request leaves out gets: the playground shows these
        transcribes = state.model is not None and state.model.tts.has_recogniser  # a clip may come without its text
        return {**state.config.settings.to_dict(), "normalize_text": state.config.normalize_text,
                "transcribes_clips": transcribes}

    @app.get("/v1/audio/voices")
    async def list_voices():
        listing = await asyncio.get_running_loop().run_in_executor(None, state.voices.book.listing)
        return {"voices": listing}

    @app.post("/v1/audio/voices")
    async def add_voice(request: Request):
        state.ready()
        form = await request.form(max_part_size=limits.max_upload_bytes)
        upload = form.get("file") or form.get("audio_sample")
        if upload is None or isinstance(upload, str):
            raise RequestError(400, "send the reference clip as the multipart file field 'file'", "file")
        voice_file = is_voice_file_name(getattr(upload, "filename", None))  # a .pt/.npz: its own transcript
        transcript = form.get("text") or form.get("ref_text")  # left out: the recogniser's, where the build has one
        if voice_file:
            transcript = ""
        elif transcript is not None and not isinstance(transcript, str):
            raise RequestError(400, "send the clip's transcript as the text field 'text', or leave it out", "text")
        name = form.get("name") or getattr(upload, "filename", None) or ""
        vid = voice_id(Path(str(name)[:256]).stem if not form.get("name") else str(name)[:256])
        voice = await save_voice(state, upload.read, transcript, vid, voice_file=voice_file)
        return {"id": vid, "name": vid, "transcript": voice.text}

    @app.get("/v1/audio/voices/{vid}")
    async def export_voice_file(vid: str, format: str = "pt"):  # noqa: A002 (the query parameter's name)
        data = await export_voice(state.voices, state.ready(), vid[:64], format)
        return Response(data, media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{vid[:64]}.{format}"'})

    @app.delete("/v1/audio/voices/{vid}")
    async def delete_voice(vid: str):
        if vid in DESIGN_VOICES:
            raise RequestError(400, f"{vid!r} is a built-in voice and cannot be deleted", "voice")
        loop = asyncio.get_running_loop()
        if not await loop.run_in_executor(None, state.voices.book.delete, vid):
            unknown = await loop.run_in_executor(None, state.voices.book.unknown_voice, vid[:64])
            raise RequestError(404, str(unknown), "voice", "voice_not_found")
        return {"id": vid, "deleted": True}

    @app.post(SPEECH_PATH)
    async def speech(request: Request):
        state.ready()
        try:
            body = await request.json()
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise RequestError(400, "the request body is not valid JSON") from None
        params = parse_speech(body, limits, state.config.settings, normalize=state.config.normalize_text)
        speaking = Speaking(state, params, "http")
        audio = _encoded(speaking, params)
        request.scope["omnivoice_speech"].append((speaking, audio))  # closed by _guard, however the response ends
        first = await _until_first_audio(request, speaking, audio, limits.request_timeout)
        if params.stream_format == "sse":
            return StreamingResponse(_sse_events(first, audio, speaking, params), media_type="text/event-stream",
                                     headers=STREAM_HEADERS)
        return StreamingResponse(_then(first, audio), media_type=CONTENT_TYPES[params.response_format],
                                 headers=STREAM_HEADERS)

    add_speech_socket(app, state)
    add_playground(app)
    return _guard(app, state, next((door for door in doors if isinstance(door, MountedDoor)), None))


async def _encoded(speaking: Speaking, params: SpeechParams):
    """The request's whole life as its response body: each chunk's audio encoded (in an executor) as
    it is ready, as (bytes, the chunk's timing), and the encoder's tail as (bytes, None). Anything that
    goes wrong, the encoder's failure included, raises through the lifecycle, so the log line says so
    and the transfer is aborted rather than ended cleanly."""
    async with speaking:
        loop = asyncio.get_running_loop()
        encoder = StreamEncoder(params.response_format, SAMPLE_RATE)
        pool = speaking.model.encode_pool
        try:
            async for piece in speaking.spoken():
                yield await loop.run_in_executor(pool, encoder.push, piece.wav), piece.timing()  # b"": FLAC until its end
            tail = await loop.run_in_executor(pool, encoder.close)
            if tail:
                yield tail, None
        finally:
            encoder.abort()


async def _until_first_audio(request: Request, speaking: Speaking, audio, timeout: float) -> tuple:
    """Voice, sentences, submission and the first sentence's audio; 504 past the timeout, and a client
    that leaves before then has its work cancelled (ended through the lifecycle)."""
    first = asyncio.ensure_future(audio.__anext__())

    async def watch():
        while not await request.is_disconnected():
            await asyncio.sleep(0.1)

    watcher = asyncio.ensure_future(watch())
    try:
        done, _ = await asyncio.wait({first, watcher}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        watcher.cancel()
    if first in done:
        return first.result()  # or the request's own error (400, 404, 429, 500, ...)
    left = watcher in done
    speaking.end("disconnected" if left else "timeout")
    first.cancel()
    with contextlib.suppress(BaseException):
        await first
    if left:
        raise RequestError(499, "client closed the request", code="client_closed")
    raise RequestError(504, f"no audio within the request timeout ({timeout:g} s); retry with shorter input or fewer "
                            "steps", code="timeout", kind="server_error")


async def _then(first: tuple, rest):
    """The audio body: the encoded bytes alone."""
    async for chunk, _ in _with_first(first, rest):
        if chunk:
            yield chunk


async def _with_first(first: tuple, rest):
    yield first
    async for encoded in rest:
        yield encoded


async def _sse_events(first: tuple, audio, speaking: Speaking, params: SpeechParams):
    """OpenAI's SSE events over the encoded audio, each chunk's audio followed by a
    `speech.audio.timing` event saying where its text lies in the audio; a failure is an `error`
    event, not a `done`."""
    try:
        async for chunk, timing in _with_first(first, audio):
            if chunk:
                event = {"type": "speech.audio.delta", "audio": base64.b64encode(chunk).decode("ascii")}
                yield f"data: {json.dumps(event)}\n\n"
            if timing is not None:
                yield f"data: {json.dumps({'type': 'speech.audio.timing', **timing})}\n\n"
    except Exception as exc:  # the lifecycle has logged it
        error = as_request_error(exc)
        event = {"type": "error", "error": {"message": error.message, "type": error.kind, "code": "generation_failed"}}
        yield f"data: {json.dumps(event)}\n\n"
        return
    input_tokens = len(speaking.model.tts.tokenizer.encode(params.text))
    output_tokens = speaking.job.output_frames()
    done = {"type": "speech.audio.done", "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                                                    "total_tokens": input_tokens + output_tokens}}
    yield f"data: {json.dumps(done)}\n\n"
