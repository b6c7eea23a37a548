"""The guard: ASGI middleware around every request the HTTP server takes, the same for plain serve.py and
every Ray replica (plain ASGI: Starlette's BaseHTTPMiddleware would turn a stream that fails into a clean end).

- every path but /health refuses a web page that may not call it (403, codes/serve/edge/origins.py);
- with --api-key, /v1/* and a mounted door's paths (/mcp) need 'Authorization: Bearer KEY' (401); a
  WebSocket from a browser, which cannot set headers, may carry the key in a subprotocol instead;
- a body past its limit is refused before it is read (by its Content-Length) or while it is (counted as it
  arrives), and one that takes past --body-seconds to arrive gets a 408, so no route ever holds more than the
  limit, or holds it for long;
- a client that leaves a response unread for --write-seconds is let go;
- a speech request that is still open when its response ends, however it ends (a response whose body never
  started streaming included), is closed: its lifecycle then frees what it held;
- a replica names itself on every answer (REPLICA_HEADER).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hmac

from fastapi.responses import JSONResponse

from codes.serve.core.params import base64_length
from codes.serve.core.state import ServerState
from codes.serve.edge.envelope import error_body
from codes.serve.edge.errors import ClientStalled, RequestError, bounded_write
from codes.serve.edge.limits import flag
from codes.serve.edge.origins import refusal

SPEECH_PATH = "/v1/audio/speech"
UPLOAD_PATH = "/v1/audio/voices"
SCRIPT_PATH = "/v1/audio/script"
REPLICA_HEADER = "x-omnivoice-replica"
KEY_SUBPROTOCOL = "omnivoice.key."  # + the key in unpadded base64url: a browser cannot set Authorization
SPEECH_SCOPE = "omnivoice_speech"  # the scope's list of (speech request, its response body) the guard closes


def error_response(error: RequestError) -> JSONResponse:
    """A refusal as its HTTP answer: its status and OpenAI's envelope."""
    return JSONResponse(error.body(), status_code=error.status)


def envelope(status: int, message: str, param=None, code=None, kind="invalid_request_error") -> JSONResponse:
    return JSONResponse(error_body(message, kind, param, code), status_code=status)


def offered_key(scope) -> bytes | None:
    """The key a browser carries in its subprotocols (KEY_SUBPROTOCOL + base64url), or None."""
    for protocol in scope.get("subprotocols") or []:
        if protocol.startswith(KEY_SUBPROTOCOL):
            encoded = protocol[len(KEY_SUBPROTOCOL):]
            try:
                return base64.urlsafe_b64decode(encoded + "=" * (-len(encoded) % 4))
            except (binascii.Error, ValueError):
                return b""
    return None


def key_subprotocol(key: str) -> str:
    """The subprotocol that carries `key` (what a browser client offers beside the stream door's own)."""
    return KEY_SUBPROTOCOL + base64.urlsafe_b64encode(key.encode("utf-8")).decode("ascii").rstrip("=")


def _key_matches(scope, key: str) -> bool:
    """Compared as bytes: a client sends a non-ASCII key as its UTF-8, and the header's latin-1 text
    re-encoded as UTF-8 never matched it."""
    given = dict(scope.get("headers") or []).get(b"authorization", b"")
    token = given[7:] if given[:7].lower() == b"bearer " else b""
    if scope["type"] == "websocket" and not token:
        token = offered_key(scope) or b""
    return hmac.compare_digest(token, key.encode("utf-8", "surrogateescape"))  # a flag of raw bytes: those bytes


def _too_large(limit: int, named: str) -> JSONResponse:
    return envelope(413, f"the request body is over {limit} bytes; send less, or start the server with a larger "
                         f"{named}", code="body_too_large")


def guarded(app, state: ServerState, mounted=None):
    """`app` behind the guard (see the module's docstring); `mounted`, a MountedDoor, serves its own paths."""

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
        door = mounted if mounted is not None and mounted.handles(scope["path"]) else None
        if key and (scope["path"].startswith("/v1/") or door is not None) and not _key_matches(scope, key):
            return await _deny(envelope(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                                        code="invalid_api_key"), scope, receive, send)
        if scope["type"] == "websocket":  # its own bounds: codes/serve/doors/stream.py
            return await app(scope, receive, send)
        spoken = scope.setdefault(SPEECH_SCOPE, [])
        try:
            return await _limited(scope, receive, _write_bounded(send, spoken), door.app if door else app)
        except ClientStalled:  # the connection is closed by the server (uvicorn logs it as incomplete)
            return
        finally:
            for _, body in spoken:
                await body.aclose()

    def _write_bounded(send, spoken):
        def stalled(reason: str) -> None:
            for speaking, _ in spoken:
                speaking.end("disconnected", reason)

        async def bounded(message):
            await bounded_write(send(message), state.config.limits.write_seconds, "write_seconds", stalled)

        return bounded

    async def _limited(scope, receive, send, target):
        limits = state.config.limits
        limit, named = {UPLOAD_PATH: (limits.max_upload_bytes, flag("max_upload_bytes")),
                        SCRIPT_PATH: (limits.max_script_bytes, flag("max_script_bytes"))}.get(
            scope["path"], (limits.max_body_bytes, flag("max_body_bytes")))
        if scope["path"] == SPEECH_PATH:  # it may carry a one-off clone's clip (ref_audio), in base64
            limit, named = (limit + base64_length(limits.max_upload_bytes),
                            f"{flag('max_body_bytes')} or {flag('max_upload_bytes')}")
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await _drain(receive)
            return await _too_large(limit, named)(scope, receive, send)
        seen, cut, whole = 0, None, False  # cut: the answer that replaces the app's once the body was cut short
        deadline = asyncio.get_running_loop().time() + limits.body_seconds

        async def counted():
            nonlocal seen, cut, whole
            if cut is not None or whole:  # after the body: only a disconnect comes, whenever it does
                return await receive()
            try:
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                cut = envelope(408, f"the request body took over {limits.body_seconds:g} s to arrive "
                                    f"({flag('body_seconds')}); send it at once", code="body_too_slow")
                return {"type": "http.request", "body": b"", "more_body": False}
            seen += len(message.get("body", b""))
            if seen > limit:  # the app reads the body as ended here, and its answer is replaced
                cut = _too_large(limit, named)
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
