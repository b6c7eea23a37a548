"""How a refusal or failure reads on every door: one RequestError per case, whatever raised it.

HTTP answers `status` with OpenAI's envelope (message, type=`kind`, param, code); Wyoming sends an
error event with the message and the code; MCP a tool error with the message. `as_request_error`
is the one mapping from the runtime's and the service's exceptions to those.
"""

from __future__ import annotations

from codes.common.errors import UserError
from codes.runtime.engine import EngineDown, QueueFull
from codes.serve.limits import Limits


class RequestError(Exception):
    """A request refused or failed, with what every door needs to say so."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind


class StreamFailed(Exception):
    """A request's audio cannot go on (its item failed, the codec failed, its deadline passed)."""

    def __init__(self, message: str, server_side: bool = True):
        super().__init__(message)
        self.server_side = server_side


class ClientStalled(ConnectionError):
    """A client left what the server sent unread past its door's write timeout (--write-seconds,
    --wyoming-write-seconds): it is let go, and its request ends as disconnected."""


def too_busy(limits: Limits) -> RequestError:
    return RequestError(429, f"the server is busy ({limits.max_concurrent} requests in flight); retry shortly",
                        code="rate_limit_exceeded", kind="rate_limit_error")


def as_request_error(exc: BaseException) -> RequestError:
    """Any exception a request can end with, as the RequestError every door reports."""
    if isinstance(exc, RequestError):
        return exc
    if isinstance(exc, QueueFull):
        return RequestError(429, str(exc), code="rate_limit_exceeded", kind="rate_limit_error")
    if isinstance(exc, UserError):
        return RequestError(400, str(exc))
    if isinstance(exc, EngineDown):
        return RequestError(503, f"{exc}; restart the server", code="engine_down", kind="server_error")
    if isinstance(exc, StreamFailed):
        return RequestError(500 if exc.server_side else 400, str(exc), code="generation_failed",
                            kind="server_error" if exc.server_side else "invalid_request_error")
    return RequestError(500, f"internal error: {type(exc).__name__}", code="internal_error", kind="server_error")
