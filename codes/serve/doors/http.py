"""The HTTP door: OpenAI's speech API (request shape, SSE events, error envelope) onto the service;
a speech request's life is codes/serve/core/lifecycle.py's, this module only translates.

Every error leaves as {"error": {"message", "type", "param", "code"}} with its status: 400 bad input
(a runtime UserError's one line becomes the message), 401 wrong or missing key, 403 a web page that may
not call (its Origin, or without a key a Host name: codes/serve/edge/origins.py), 404 no such voice or
route, 408 a body that arrives too slowly, 409 a voice name taken or too many voices, 413 a body past
its limit (a speech request's may add a ref_audio clip's base64 to --max-body-bytes) or a clip past
--max-upload-bytes, 429 queue full or too many requests, 503 loading, shutting down or the engine stopped, 504
no audio within the request timeout.
A failure after the first audio ends the stream as an error the client sees (an SSE `error` event,
or an aborted transfer), never as a clean end. The event loop only routes: reading clips, loading and
saving voices and encoding audio run in executors (codes/serve/edge/limits.py has every limit).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import Sequence

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from codes.runtime.contract.specs import SAMPLE_RATE
from codes.runtime.text.voice_design import design_vocabulary, language_choices
from codes.serve.core.encode import CONTENT_TYPES, StreamEncoder, encode_whole
from codes.serve.core.lifecycle import RequestLife, ScriptRequest, SpeechRequest, save_voice
from codes.serve.core.params import (MODEL_IDS, ScriptParams, SpeechParams, design_instructions, parse_script_request,
                                     parse_speech)
from codes.serve.core.script_stream import script_summary
from codes.serve.core.state import ServerState
from codes.serve.doors.contract import Door, MountedDoor
from codes.serve.doors.guard import SCRIPT_PATH, SPEECH_PATH, SPEECH_SCOPE, UPLOAD_PATH, envelope, error_response, guarded
from codes.serve.doors.playground import add_playground
from codes.serve.doors.playground.web_site import add_web_site
from codes.serve.doors.stream import add_stream_door
from codes.serve.edge.errors import REFUSALS, ClientStalled, RequestError, as_request_error
from codes.serve.voices.book import NotDeletable, asked_id
from codes.serve.voices.files import export_voice

logger = logging.getLogger("omnivoice.serve")
LANGUAGES = language_choices()
VOICE_DESIGN = design_vocabulary()

STREAM_HEADERS = {"X-Accel-Buffering": "no", "Cache-Control": "no-cache"}


def create_app(state: ServerState, doors: Sequence[Door] = ()):
    """The HTTP API as an ASGI app. `doors` run with it (codes/serve/doors/contract.py: each one's `running()`, e.g.
    the Wyoming server); a MountedDoor (MCP) serves its paths, behind the same key and body limits."""

    @contextlib.asynccontextmanager
    async def lifespan(_):
        async with contextlib.AsyncExitStack() as stack:
            for door in doors:
                await stack.enter_async_context(door.running())
            yield

    app = FastAPI(title="omnivoice-onnx", docs_url=None, redoc_url=None, openapi_url=None, lifespan=lifespan)
    app.state.omnivoice = state
    _answer_errors(app)
    for router in (_info_routes(state), _voice_routes(state), _speech_routes(state)):
        app.include_router(router)
    add_stream_door(app, state)
    add_playground(app)
    add_web_site(app, state.config.web_site)
    return guarded(app, state, next((door for door in doors if isinstance(door, MountedDoor)), None))


def _answer_errors(app: FastAPI) -> None:
    """Every failure as OpenAI's error envelope: refusals as they are, anything else as the server's fault."""

    async def _refused(_, exc: Exception):
        return error_response(as_request_error(exc))

    for refused in REFUSALS:
        app.add_exception_handler(refused, _refused)

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
        return error_response(as_request_error(exc))


def _info_routes(state: ServerState) -> APIRouter:
    """What the server is and offers: health, models, languages, the voice-design vocabulary, its defaults."""
    router = APIRouter()

    @router.get("/health")
    async def health():
        error = state.unavailable()
        if error is not None:
            return error_response(error)
        engine = state.model.engine
        return {"status": "ok", "outstanding_items": len(state.model.outstanding), "requests_in_flight": state.in_flight,
                "max_batch": engine.max_batch, "max_queue": engine.max_queue,
                "voices": state.voices.book.imported_status()}  # imported clips still encoding, in the background

    @router.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": m, "object": "model", "created": 0, "owned_by": "omnivoice-onnx"}
                                           for m in MODEL_IDS]}

    @router.get("/v1/audio/models")
    async def audio_models():  # Open WebUI lists its TTS models from here
        return {"models": [{"id": m} for m in MODEL_IDS]}

    @router.get("/v1/audio/languages")
    async def languages():  # the playground's list: every language the model knows, by upstream's display names
        return {"languages": LANGUAGES}

    @router.get("/v1/audio/voice-design")
    async def voice_design():  # the playground's Design lists: upstream's vocabulary, by category
        return {"categories": VOICE_DESIGN}

    @router.post("/v1/audio/voice-design")
    async def voice_design_instructions(request: Request):  # the chosen items as the instruct the runtime reads
        return {"instructions": design_instructions(await _json_body(request))}

    @router.get("/v1/audio/defaults")
    async def defaults():  # what a speech request leaves out gets: the playground shows these
        transcribes = state.model is not None and state.model.tts.has_recogniser  # a clip may come without its text
        words = state.model is not None and state.model.word_timings  # timings may say when each word is heard
        return {**state.config.settings.to_dict(), "normalize_text": state.config.normalize_text,
                "transcribes_clips": transcribes, "word_timings": words}

    return router


def _voice_routes(state: ServerState) -> APIRouter:
    """Saved voices: listed, uploaded, exported, deleted."""
    router = APIRouter()
    @router.get("/v1/audio/voices")
    async def list_voices():
        listing = await asyncio.get_running_loop().run_in_executor(None, state.voices.book.listing)
        return {"voices": listing}

    @router.post(UPLOAD_PATH)
    async def add_voice(request: Request):
        state.ready()
        form = await request.form(max_part_size=state.config.limits.max_upload_bytes)
        upload = form.get("file") or form.get("audio_sample")
        if upload is None or isinstance(upload, str):
            raise RequestError(400, "send the reference clip as the multipart file field 'file'", "file")
        transcript = form.get("text") or form.get("ref_text")  # left out: the recogniser's, where the build has one
        if transcript is not None and not isinstance(transcript, str):
            raise RequestError(400, "send the clip's transcript as the text field 'text', or leave it out", "text")
        name = form.get("name")
        vid, voice = await save_voice(state, upload.read, getattr(upload, "filename", None),
                                      name if isinstance(name, str) else None, transcript)
        return {"id": vid, "name": vid, "transcript": voice.text}

    @router.get("/v1/audio/voices/{vid}")
    async def export_voice_file(vid: str, format: str = "pt"):  # noqa: A002 (the query parameter's name)
        vid = asked_id(vid)
        data = await export_voice(state.voices, state.ready(), vid, format)
        return Response(data, media_type="application/octet-stream",
                        headers={"Content-Disposition": f'attachment; filename="{vid}.{format}"'})

    @router.delete("/v1/audio/voices/{vid}")
    async def delete_voice(vid: str):
        vid, loop = asked_id(vid), asyncio.get_running_loop()
        try:
            deleted = await loop.run_in_executor(None, state.voices.book.delete, vid)
        except NotDeletable as exc:
            raise RequestError(400, str(exc), "voice") from None
        if not deleted:
            unknown = await loop.run_in_executor(None, state.voices.book.unknown_voice, vid)
            raise RequestError(404, str(unknown), "voice", "voice_not_found")
        return {"id": vid, "deleted": True}

    return router


def _speech_routes(state: ServerState) -> APIRouter:
    """Speech and scripts: each request's life through the core, its audio out as it is made."""
    router = APIRouter()
    limits = state.config.limits

    @router.post(SPEECH_PATH)
    async def speech(request: Request):
        state.ready()
        params = parse_speech(await _json_body(request), limits, state.config.settings, normalize=state.config.normalize_text)
        speaking = SpeechRequest(state, params, "http")
        audio = _encoded(speaking, params)
        request.scope[SPEECH_SCOPE].append((speaking, audio))  # closed by the guard, however the response ends
        first = await _until_first_audio(request, speaking, audio, limits.request_timeout)
        if params.stream_format == "sse":
            return StreamingResponse(_sse_events(first, audio, speaking, params), media_type="text/event-stream",
                                     headers=STREAM_HEADERS)
        return StreamingResponse(_then(first, audio), media_type=CONTENT_TYPES[params.response_format],
                                 headers=STREAM_HEADERS)

    @router.post(SCRIPT_PATH)
    async def script(request: Request):
        state.ready()
        params = parse_script_request(await _json_body(request), limits, state.config.settings, normalize=state.config.normalize_text)
        scripting = ScriptRequest(state, params, "http")
        events = _script_events(scripting, params)
        request.scope[SPEECH_SCOPE].append((scripting, events))  # closed by the guard, however the response ends
        # the first event comes once the script is read, its voices resolved and planned: refusals are statuses
        first = await _while_connected(request, scripting, events.__anext__(), limits.request_timeout)
        if params.stream_format == "sse":
            return StreamingResponse(_sse_lines(_with_first(first, events)), media_type="text/event-stream",
                                     headers=STREAM_HEADERS)
        last = await _while_connected(request, scripting, _last(events), None)
        return JSONResponse(last)

    return router


async def _json_body(request: Request):
    try:
        return await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise RequestError(400, "the request body is not valid JSON") from None


async def _encoded(speaking: SpeechRequest, params: SpeechParams):
    """The request's whole life as its response body: each chunk's audio encoded (in an executor) as
    it is ready, as (bytes, None); for SSE each chunk's timing as soon as it is known, as (b"", timing);
    and the encoder's tail as (bytes, None). Anything that goes wrong, the encoder's failure included,
    raises through the lifecycle, so the log line says so and the transfer is aborted rather than ended
    cleanly."""
    async with speaking:
        loop = asyncio.get_running_loop()
        encoder = StreamEncoder(params.response_format, SAMPLE_RATE)
        pool = speaking.model.encode_pool
        try:
            async for heard in (speaking.heard() if params.stream_format == "sse" else speaking.spoken()):
                if isinstance(heard, dict):
                    yield b"", heard
                else:  # b"": FLAC until its end
                    yield await loop.run_in_executor(pool, encoder.push, heard.wav), None
            tail = await loop.run_in_executor(pool, encoder.close)
            if tail:
                yield tail, None
        finally:
            encoder.abort()


async def _until_first_audio(request: Request, speaking: SpeechRequest, audio, timeout: float) -> tuple:
    """Voice, sentences, submission and the first sentence's audio; 504 past the timeout, and a client
    that leaves before then has its work cancelled (ended through the lifecycle)."""
    return await _while_connected(request, speaking, audio.__anext__(), timeout)


async def _while_connected(request: Request, life: RequestLife, waiting, timeout: float | None):
    """What `waiting` gives; 504 past the timeout, and a client that leaves before then has its work
    cancelled (ended through the lifecycle)."""
    first = asyncio.ensure_future(waiting)

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
    life.end("disconnected" if left else "timeout")
    first.cancel()
    with contextlib.suppress(BaseException):
        await first
    if left:
        raise RequestError(499, "client closed the request", code="client_closed")
    raise RequestError(504, f"no audio within the request timeout ({timeout:g} s); retry with shorter input or fewer "
                            "steps", code="timeout", kind="server_error")


async def _last(events):
    """The last of a generator's items (a script's done event, in one JSON answer)."""
    last = None
    async for last in events:
        pass
    return last


async def _sse_lines(events):
    async for event in events:
        yield f"data: {json.dumps(event)}\n\n"


async def _script_events(scripting: ScriptRequest, params: ScriptParams):
    """A script request's life as events: `script.started` once it is planned, then with stream_format sse
    `script.progress` (pieces done of all) and `script.audio.delta` (the track's next bytes, in timeline
    order) as each piece is placed, and `script.done` (the captions, each segment's place, the whole audio
    where no stream carried it). A failure after the start is an `error` event; before it, the refusal."""
    async with scripting:
        plan = scripting.job.plan
        yield {"type": "script.started", "segments": len(plan.pieces), "speakers": list(plan.speakers),
               "warnings": list(plan.warnings)}
        streaming = params.stream_format == "sse"
        loop = asyncio.get_running_loop()
        pool = scripting.model.encode_pool
        encoder = StreamEncoder(params.response_format, SAMPLE_RATE) if streaming else None
        try:
            async for step in scripting.progress():
                if not streaming:
                    continue
                yield {"type": "script.progress", "done": step.done, "total": step.total,
                       "audio_seconds": (step.start + len(step.audio)) / SAMPLE_RATE}
                data = await loop.run_in_executor(pool, encoder.push, step.audio) if len(step.audio) else b""
                if data:
                    yield {"type": "script.audio.delta", "audio": base64.b64encode(data).decode("ascii")}
            rendered = scripting.job.rendered
            if streaming:
                tail = await loop.run_in_executor(pool, encoder.close)
                if tail:
                    yield {"type": "script.audio.delta", "audio": base64.b64encode(tail).decode("ascii")}
                audio = None
            else:
                audio = await loop.run_in_executor(pool, encode_whole, rendered.audio, params.response_format,
                                                   SAMPLE_RATE)
        except Exception as exc:  # the lifecycle has logged it; a stream says so in an event
            if not streaming:
                raise
            yield as_request_error(exc).event()
            return
        finally:
            if encoder is not None:
                encoder.abort()
    done = {"type": "script.done", **script_summary(rendered, params.response_format, params.captions, scripting.book)}
    if audio is not None:
        done["audio"] = base64.b64encode(audio).decode("ascii")
    yield done


async def _then(first: tuple, rest):
    """The audio body: the encoded bytes alone."""
    async for chunk, _ in _with_first(first, rest):
        if chunk:
            yield chunk


async def _with_first(first: tuple, rest):
    yield first
    async for encoded in rest:
        yield encoded


async def _sse_events(first: tuple, audio, speaking: SpeechRequest, params: SpeechParams):
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
        yield f"data: {json.dumps({'type': 'error', **as_request_error(exc).body()})}\n\n"
        return
    input_tokens = len(speaking.model.tts.tokenizer.encode(params.text))
    output_tokens = speaking.job.output_frames()
    done = {"type": "speech.audio.done", "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens,
                                                    "total_tokens": input_tokens + output_tokens}}
    yield f"data: {json.dumps(done)}\n\n"
