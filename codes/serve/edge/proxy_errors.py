"""In Ray Serve's HTTP proxy: its own answers in OpenAI's error envelope, like every answer of the app's.

Ray's proxy answers for itself when no replica does: a replica that died with the request on it
(nothing at all is sent: uvicorn would write a text 500), no replica to route to (503), its own
timeout (408), its queue full (429: the deployment's max_queued_requests with a backpressure_config
of 429). This middleware, loaded into the proxy through RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH
(codes/serve/launch/deployment.py sets it when it starts Serve), turns those into the envelope, for paths
under our route only: other applications on the same proxy keep their own answers. A replica that dies after its response started cannot change the status any more: an SSE
stream then ends with an `error` event (as the app's own failures do), any other stream is cut
short (an aborted transfer the client sees as an error, never a clean end). Imports no more than
starlette, which the proxy has, and the envelope's own module.
"""

from __future__ import annotations

import json
import os

from codes.serve.edge.envelope import error_body, error_bytes, error_event

IMPORT_PATH = "codes.serve.edge.proxy_errors:middlewares"
ROUTE_ENV = "OMNIVOICE_ROUTE_PREFIX"  # set in the proxy's environment: our application's route
# The proxy's own statuses: (code, type) in the envelope.
CODES = {408: ("timeout", "server_error"), 503: ("unavailable", "server_error"),
         429: ("rate_limit_exceeded", "rate_limit_error")}
BUSY = "every replica is busy and Ray's queue for them is full ({}); retry shortly"
LOST = ("the replica serving this request stopped before it answered (its process ended); retry: "
        "Ray Serve routes new requests to the replicas that are up")
LOST_STREAM = "the replica serving this request stopped while it streamed (its process ended); retry"


def middlewares() -> list:
    from starlette.middleware import Middleware

    return [Middleware(ProxyErrors)]


def _envelope(status: int, message: str, code: str, kind: str = "server_error",
              extra_headers: list | None = None) -> tuple[dict, dict]:
    body = error_bytes(message, kind, code=code)
    start = {"type": "http.response.start", "status": status,
             "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                         *(extra_headers or [])]}
    return start, {"type": "http.response.body", "body": body, "more_body": False}


def _ours(path: str, route: str) -> bool:
    route = route.rstrip("/")
    return not route or path == route or path.startswith(route + "/")


class ProxyErrors:
    def __init__(self, app):
        self.app = app
        self.route = os.environ.get(ROUTE_ENV, "/")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not _ours(scope.get("path", "/"), self.route):
            return await self.app(scope, receive, send)
        started = ended = sse = False
        held: dict | None = None  # a text/plain start of the proxy's own: its body becomes the message

        async def relay(message):
            nonlocal started, ended, sse, held
            kind = message["type"]
            if kind == "http.response.start":
                headers = {key.lower(): value for key, value in message.get("headers", [])}
                content_type = headers.get(b"content-type", b"")
                if message["status"] >= 400 and content_type.startswith(b"text/plain"):
                    # ours never are text/plain
                    held = {"status": message["status"], "body": b"",
                            "headers": [(key, value) for key, value in message.get("headers", [])
                                        if key.lower() == b"retry-after"]}
                    return
                started, sse = True, content_type.startswith(b"text/event-stream")
            elif kind == "http.response.body" and held is not None:
                held["body"] += message.get("body", b"")
                if not message.get("more_body"):
                    text = held["body"].decode("utf-8", "replace").strip() or "the service is unavailable"
                    code, error_type = CODES.get(held["status"], ("proxy_error", "server_error"))
                    if held["status"] == 429:
                        text = BUSY.format(text.rstrip("."))
                    started = ended = True
                    for part in _envelope(held["status"], text, code, error_type, held["headers"]):
                        await send(part)
                return
            elif kind == "http.response.body" and not message.get("more_body"):
                ended = True
            await send(message)

        await self.app(scope, receive, relay)
        if not started:
            for part in _envelope(502, LOST, "replica_lost"):
                await send(part)
        elif not ended and sse:
            event = error_event(error_body(LOST_STREAM, "server_error", code="replica_lost"))
            await send({"type": "http.response.body", "body": f"data: {json.dumps(event)}\n\n".encode(),
                        "more_body": False})
