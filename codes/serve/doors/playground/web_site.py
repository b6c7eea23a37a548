"""A web build's site at /web/ (issue 60): the page, the JavaScript runtime, onnxruntime-web and the graphs, which
the browser downloads and runs itself. Plain files, outside the API key like the playground's, with the headers that
make the page cross-origin isolated (WebAssembly may then run on several threads).

The folder is a web build (its manifest says "profile": "web"), served when it is the model, or any folder given
with --web-site. Its files are listed once, when the app is made: a request's path is looked up among them and
never joined to the disk, so no spelling of ../ reaches outside the folder, and a link inside it that leads out
is not listed.
"""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, RedirectResponse
from starlette.exceptions import HTTPException

from codes.common.errors import UserError

PREFIX = "/web"
PAGE = "index.html"
OCTETS = "application/octet-stream"
# By suffix, here rather than from the host's mimetypes: a module script needs a JavaScript type and
# WebAssembly.instantiateStreaming needs application/wasm, whatever /etc/mime.types says.
TYPES = {".html": "text/html; charset=utf-8", ".mjs": "text/javascript; charset=utf-8",
         ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".wasm": "application/wasm",
         ".json": "application/json", ".webmanifest": "application/manifest+json", ".map": "application/json",
         ".txt": "text/plain; charset=utf-8", ".md": "text/plain; charset=utf-8", ".svg": "image/svg+xml",
         ".png": "image/png", ".ico": "image/x-icon"}
# 'wasm-unsafe-eval': WebAssembly compiles; blob: for onnxruntime-web's workers and the page's WAV.
POLICY = ("default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; worker-src 'self' blob:; "
          "connect-src 'self' blob: data:; media-src 'self' blob:; img-src 'self' data: blob:; "
          "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
HEADERS = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp",
           "Cross-Origin-Resource-Policy": "same-origin", "Content-Security-Policy": POLICY,
           "Cache-Control": "no-cache", "X-Content-Type-Options": "nosniff"}


def site_folder(given: Path | None, model_dir: Path) -> Path | None:
    """What /web/ serves: --web-site DIR (a folder holding index.html), else the model folder when it is a web
    build, else nothing."""
    from codes.runtime.contract.manifest import MANIFEST_NAME, read_manifest

    if given is not None:
        if not (Path(given) / PAGE).is_file():
            raise UserError(f"--web-site {given} holds no {PAGE}; give a web build (optimize.py --device web "
                            "--output DIR) or a copy of its site")
        return Path(given)
    if not (Path(model_dir) / MANIFEST_NAME).is_file():
        return None
    return Path(model_dir) if read_manifest(model_dir, verify=False).data.get("profile") == "web" else None


def site_files(folder: Path) -> dict[str, Path]:
    """Every plain file under `folder` by its path from there ("ort/ort.wasm"), hidden ones and links that lead out
    of the folder left out."""
    root = folder.resolve()
    files = {}
    for top, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            path = Path(top) / name
            if name.startswith(".") or not path.is_file() or not path.resolve().is_relative_to(root):
                continue
            files[path.relative_to(root).as_posix()] = path
    return files


def add_web_site(app: FastAPI, folder: Path | None) -> None:
    """GET and HEAD /web/<path> (the site's files; /web/ is its page: the runtime asks HEAD whether a file is
    there), and /web itself sent on to /web/ so the page's relative URLs resolve inside the site."""
    if folder is None:
        return
    files = site_files(folder)

    async def site_root():
        return RedirectResponse(f"{PREFIX}/", status_code=308)

    async def site_file(name: str):
        path = files.get(name + PAGE if name == "" or name.endswith("/") else name)
        if path is None:
            raise HTTPException(404, f"no file {name!r} in the web site")
        return FileResponse(path, media_type=TYPES.get(path.suffix, OCTETS), headers=HEADERS)

    for path, answer in ((PREFIX, site_root), (PREFIX + "/{name:path}", site_file)):
        app.add_api_route(path, answer, methods=["GET", "HEAD"], include_in_schema=False)
