"""OpenAI's error body, `{"error": {"message", "type", "param", "code"}}`: the one shape every answer that
refuses or fails takes, whoever writes it (the app, the connection bounds, the stream door, Ray's proxy),
and the streamed error event that carries it (`{"type": "error", "error": {...}}`: SSE and the WebSocket).

Imports nothing but the standard library, since Ray's HTTP proxy loads codes/serve/edge/proxy_errors.py, which uses it:
that is why it is not in errors.py, which imports the runtime (the engine's exceptions). errors.py's
RequestError.body() and every door build the body here.
"""

from __future__ import annotations

import json


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None,
               code: str | None = None) -> dict:
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def error_bytes(message: str, kind: str = "invalid_request_error", param: str | None = None,
                code: str | None = None) -> bytes:
    return json.dumps(error_body(message, kind, param, code)).encode()


def error_event(body: dict) -> dict:
    """A stream's error event around an error body (error_body's, or RequestError.body())."""
    return {"type": "error", **body}
