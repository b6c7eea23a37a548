"""HTTP connections, bounded: how many serve.py holds open, and how long and how large a request's head may be.

uvicorn 0.54 over httptools (what its "auto" picks) accepts every connection, arms no timer before a
connection's first answer and reads a request's line and headers with no bound of time or size, so idle
sockets and slowly sent headers each hold a file descriptor for as long as their client likes. Its
`limit_concurrency` does not help: it counts connections only once a head is complete, and answers 503 in
plain text then, so it never sees the idle and slow ones that take the descriptors. This protocol does
it at the socket instead (docs/DESIGN.md §http-bounds): at most --max-connections open, the one waiting
longest for a request's head closed to make room; --header-seconds for a head, 408 past it;
--max-header-bytes for a head, 431 past it. uvicorn's own keep-alive timer still closes an idle connection
after --keep-alive-seconds. The body, the app and the response keep their own bounds (codes/serve/doors/http.py).
"""

from __future__ import annotations

import functools
import logging
import resource
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

from codes.common.errors import UserError
from codes.serve.edge.envelope import error_bytes
from codes.serve.edge.limits import Limits, flag

logger = logging.getLogger("omnivoice.serve")

RESERVED_DESCRIPTORS = 256  # besides HTTP connections: the build's files, logs, executors, Wyoming's listener
LINGER_SECONDS = 1.0  # after an answer the server sends on its own, what the client still sends is read and dropped
LOG_EVERY_SECONDS = 10.0  # at most one line this often about connections closed to make room


@dataclass(eq=False)
class Connections:
    """One server's HTTP connections: those open, and those waiting for a request's head, longest first."""

    limits: Limits
    open: set = field(default_factory=set)
    waiting: OrderedDict = field(default_factory=OrderedDict)
    evicted: int = 0
    logged_at: float = float("-inf")

    def admit(self, conn) -> bool:
        """Count a new connection in, closing one that waits for a head if need be; False when none can go."""
        cap = self.limits.max_connections
        if len(self.open) >= cap and not self._make_room():
            # an upgraded (WebSocket) connection is counted until its socket closes, which no callback here hears
            self.open = {other for other in self.open if not other.transport.is_closing()}
            if len(self.open) >= cap:
                return False
        self.open.add(conn)
        return True

    def _make_room(self) -> bool:
        """Close the connection that has waited longest for a request's head; False when none waits."""
        if not self.waiting:
            return False
        oldest, _ = self.waiting.popitem(last=False)
        oldest.let_go()
        self.evicted += 1
        now = time.monotonic()
        if now - self.logged_at >= LOG_EVERY_SECONDS:
            self.logged_at = now
            logger.warning("http: %d connections open (%s): closing those waiting longest for a request "
                           "(%d so far)", len(self.open), flag("max_connections"), self.evicted)
        return True


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, with the connection cap and the head's time and size bounds."""

    def __init__(self, *args, connections: Connections, **kwargs):
        super().__init__(*args, **kwargs)
        self.bounds = connections
        self.head_timer = None  # armed while the connection waits for a request's head
        self.in_head = False  # a request's line or headers have begun and are not complete
        self.head_bytes = 0
        self.answered = False  # the server answered on its own; the connection is lingering, then closes

    # The connection's life
    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        if not self.bounds.admit(self):  # every other one is in a request
            self._answer(503, f"the server has {self.bounds.limits.max_connections} connections open, each in a "
                              "request; retry shortly", "too_many_connections", "server_error", linger=False)
            return
        self._await_head()

    def connection_lost(self, exc) -> None:
        self._stop_waiting()
        self.bounds.open.discard(self)
        super().connection_lost(exc)

    def let_go(self) -> None:
        """Closed to make room: it was waiting for a request, so nothing of an answer is lost."""
        self._stop_waiting()
        self.bounds.open.discard(self)
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.answered:
            return
        if self.in_head:  # bytes of a head that began in an earlier read: a head passes the cap by one read at most
            self.head_bytes += len(data)
        super().data_received(data)
        if self.in_head and self.head_bytes > self.bounds.limits.max_header_bytes and not self.answered:
            self._answer(431, f"the request's line and headers are over {self.bounds.limits.max_header_bytes} "
                              f"bytes; send less, or start the server with a larger {flag('max_header_bytes')}",
                         "headers_too_large")

    def send_400_response(self, msg: str) -> None:  # httptools could not parse the request
        self._answer(400, f"not an HTTP request this server can read ({msg.rstrip('.')})", "invalid_http")

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.cycle.response_complete:  # no pipelined request started
            self._await_head()

    def handle_websocket_upgrade(self) -> None:
        self._stop_waiting()  # the WebSocket protocol owns the socket now; it stays counted until it closes
        super().handle_websocket_upgrade()

    # httptools' parser callbacks
    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.in_head, self.head_bytes = True, 0

    def on_headers_complete(self) -> None:
        self.in_head = False
        self._stop_waiting()
        super().on_headers_complete()

    # Waiting for a head
    def _await_head(self) -> None:
        self._stop_waiting()
        self.bounds.waiting[self] = None
        self.head_timer = self.loop.call_later(self.bounds.limits.header_seconds, self._head_too_slow)

    def _stop_waiting(self) -> None:
        if self.head_timer is not None:
            self.head_timer.cancel()
            self.head_timer = None
        self.bounds.waiting.pop(self, None)

    def _head_too_slow(self) -> None:
        self.head_timer = None
        self.bounds.waiting.pop(self, None)
        if self.transport.is_closing() or self.answered:
            return
        if not self.in_head:  # nothing of a request came: closed, as an idle keep-alive connection is
            self.transport.close()
            return
        seconds = self.bounds.limits.header_seconds
        self._answer(408, f"the request's line and headers took over {seconds:g} s to arrive "
                          f"({flag('header_seconds')})", "headers_too_slow")

    def _answer(self, status: int, message: str, code: str, kind: str = "invalid_request_error",
                linger: bool = True) -> None:
        """An answer of the server's own in OpenAI's envelope, then the connection closes. Lingering: its write side
        at once (the client sees the answer and the end), the rest once the client has stopped sending or after
        LINGER_SECONDS, so what it still sends cannot reset the connection before the answer is read."""
        self._stop_waiting()
        self.answered = True  # what the client sends from now on is dropped
        if self.cycle is not None and not self.cycle.response_complete:  # a pipelined head, while a request is
            self.cycle.keep_alive = False  # answered: nothing may go into the middle of that answer; it closes after
            return
        body = error_bytes(message, kind, code=code)
        head = [STATUS_LINE[status]]
        head += [name + b": " + value + b"\r\n" for name, value in self.server_state.default_headers]
        head += [b"content-type: application/json\r\n", b"content-length: %d\r\n" % len(body),
                 b"connection: close\r\n\r\n"]
        self.transport.write(b"".join(head) + body)
        if linger and self.transport.can_write_eof():
            self.transport.write_eof()
            self.loop.call_later(LINGER_SECONDS, self.transport.close)
        else:
            self.transport.close()


def bounded_http(limits: Limits) -> dict:
    """uvicorn.Config's settings for these bounds: one Connections per server."""
    return {"http": functools.partial(BoundedHttpProtocol, connections=Connections(limits)),
            "timeout_keep_alive": limits.keep_alive_seconds}


def fit_descriptors(limits: Limits, wyoming: bool = False) -> None:
    """Raise the process's file-descriptor limit to what the limits need, where its hard limit allows (UserError
    where it does not)."""
    needed = limits.max_connections + RESERVED_DESCRIPTORS + (limits.wyoming_max_connections if wyoming else 0)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return
    if hard != resource.RLIM_INFINITY and hard < needed:
        most = hard - (needed - limits.max_connections)
        lower = f"lower {flag('max_connections')} to {most} or " if most >= 1 else ""
        raise UserError(f"{flag('max_connections')} {limits.max_connections} needs {needed} file descriptors and "
                        f"this process may open {hard} (ulimit -Hn): {lower}raise the limit")
    resource.setrlimit(resource.RLIMIT_NOFILE, (needed, hard))
