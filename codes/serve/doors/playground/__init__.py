"""The browser playground: this folder's plain files at `/`, served by the server itself.

The page calls only the public API (/v1/audio/speech, /v1/audio/voices, /v1/audio/models, /v1/audio/languages,
/v1/audio/voice-design, /v1/audio/defaults, /v1/audio/script), from the
server's own origin, so app.py's guard treats it as any client: the page loads without the key (the
guard keys /v1/* only) and asks for it when the API answers 401. Nothing is fetched from elsewhere,
and the Content-Security-Policy below makes the browser refuse it if a change ever tried.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse

FOLDER = Path(__file__).parent
# The only files served, by name: a path from the request never reaches the disk.
FILES = {"index.html": "text/html; charset=utf-8", "style.css": "text/css; charset=utf-8",
         "api.js": "text/javascript; charset=utf-8", "player.js": "text/javascript; charset=utf-8",
         "app.js": "text/javascript; charset=utf-8", "script.js": "text/javascript; charset=utf-8"}
# blob: for the finished audio and its Download link; data: for the empty favicon.
POLICY = ("default-src 'self'; media-src 'self' blob:; img-src 'self' data:; connect-src 'self'; "
          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Content-Security-Policy": POLICY, "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


def add_playground(app: FastAPI) -> None:
    """GET / (the page) and GET /playground/<file> (its scripts and style)."""

    def page(name: str) -> FileResponse:
        return FileResponse(FOLDER / name, media_type=FILES[name], headers=HEADERS)

    @app.get("/", include_in_schema=False)
    async def playground():
        return page("index.html")

    def route(name: str):
        async def serve_file():  # no parameters: FastAPI would read a default argument from the query
            return page(name)
        return serve_file

    for name in FILES:
        app.add_api_route(f"/playground/{name}", route(name), methods=["GET"], include_in_schema=False)
