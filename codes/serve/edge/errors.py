"""How a refusal or failure reads on every door: one RequestError per case, whatever raised it.

HTTP answers `status` with OpenAI's envelope (message, type=`kind`, param, code: codes/serve/edge/envelope.py);
the stream door sends the same body in an error message; Wyoming sends an error event with the message and
the code; MCP a tool error with the message. `REFUSALS` are the exceptions a door tells its client as they
are (anything else is a fault of the server's, logged); `as_request_error` is the one mapping from them to
RequestError. `bounded_write` is every door's write to a client that may stop reading.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from codes.common.errors import UserError
from codes.runtime.model.engine import EngineDown, QueueFull
from codes.serve.edge.envelope import error_body, error_event
from codes.serve.edge.limits import Limits, flag


class RequestError(Exception):
    """A request refused or failed, with what every door needs to say so."""

    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.message, self.param, self.code, self.kind = status, message, param, code, kind

    def body(self) -> dict:
        """OpenAI's error envelope of this refusal."""
        return error_body(self.message, self.kind, self.param, self.code)

    def event(self) -> dict:
        """The refusal as a stream's error event (SSE, the WebSocket)."""
        return error_event(self.body())


class StreamFailed(Exception):
    """A request's audio cannot go on (its item failed, the codec failed, its deadline passed)."""

    def __init__(self, message: str, server_side: bool = True):
        super().__init__(message)
        self.server_side = server_side


class ClientStalled(ConnectionError):
    """A client left what the server sent unread past its door's write timeout (--write-seconds,
    --wyoming-write-seconds): it is let go, and its request ends as disconnected."""


# What a request may end with that its client is told as it is (RequestError's status and message); any
# other exception is a fault of the server's: logged, and told as an internal error.
REFUSALS = (RequestError, UserError, StreamFailed, EngineDown)


async def bounded_write(writing: Awaitable, seconds: float, limit: str,
                        on_stall: Callable[[str], None] | None = None):
    """A write to a client within `seconds`, the limit named by `limit` (a Limits field, such as
    "write_seconds"): past it, `on_stall(reason)` runs (ending the request, aborting the transport) and
    ClientStalled is raised, so a client that reads nothing lets go of what it holds."""
    try:
        async with asyncio.timeout(seconds):  # not wait_for: see docs/DESIGN.md §deadlines
            return await writing
    except TimeoutError:
        reason = f"the client read nothing for {seconds:g} s ({flag(limit)}); closed"
        if on_stall is not None:
            on_stall(reason)
        raise ClientStalled(reason) from None


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
