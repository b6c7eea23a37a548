"""The door contract: what a protocol served beside OpenAI's HTTP API (Wyoming, MCP) gives the server.

codes/serve/launch/startup.py doors() makes the doors from the flags; codes/serve/doors/http.py create_app runs each one's
`running()` for as long as the HTTP server runs (its lifespan), and hands the paths a `MountedDoor` handles
to that door's ASGI app behind the same guard (key, Origin, body limits) as /v1/*. A door only translates:
a request's life is codes/serve/core/lifecycle.py's.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Awaitable, Callable, Protocol, runtime_checkable

# An ASGI app: (scope, receive, send).
AsgiApp = Callable[[dict, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[Any]]


class Door(Protocol):
    def running(self) -> AbstractAsyncContextManager[None]:
        """Serving while it is entered (listening, or a session manager running), on the server's event
        loop; on exit it stops taking work and ends its connections."""


@runtime_checkable
class MountedDoor(Door, Protocol):
    """A door served on the HTTP server's own port, under paths of its own (MCP's /mcp)."""

    app: AsgiApp

    def handles(self, path: str) -> bool:
        """Whether a request's path is this door's."""
