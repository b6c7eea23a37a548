"""The state every door shares (HTTP in app.py, Wyoming in wyoming.py, MCP in mcp.py): the loaded
model, the voices, the limits, and the one count of requests in flight. A request's life on it is
codes/serve/core/lifecycle.py's; its fields are codes/serve/core/params.py's.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from pathlib import Path

from codes.runtime.contract.settings import GenerationSettings
from codes.serve.core.kept_pieces import PieceStore
from codes.serve.core.loaded_model import LoadedModel
from codes.serve.edge.errors import RequestError, too_busy
from codes.serve.edge.limits import Limits, flag
from codes.serve.edge.origins import BrowserRules
from codes.serve.voices.resolver import Voices

@dataclass
class ServerConfig:
    voices_dir: Path
    api_key: str | None = None
    limits: Limits = field(default_factory=Limits)
    settings: GenerationSettings = field(default_factory=GenerationSettings)  # what a request leaves out
    replica: str | None = None  # a Ray Serve replica's NAME/PID: sent as a response header and in the request log
    browsers: BrowserRules = field(default_factory=BrowserRules)  # which web pages may call (--allow-origin/-host)
    normalize_text: bool = False  # --normalize-text: a request that does not say is normalized
    web_site: Path | None = None  # the folder served at /web/ (a web build's site), or None


@dataclass
class ServerState:
    config: ServerConfig
    voices: Voices
    model: LoadedModel | None = None  # None until the model is loaded, warmed and its preloads pinned
    request_ids: itertools.count = field(default_factory=lambda: itertools.count(1))
    in_flight: int = 0  # requests between admission and their last byte
    scripts: int = 0  # of those, scripts (each holds its track in memory: --max-scripts)
    draining: bool = False  # SIGTERM came: no new work, running requests finish
    script_pieces: PieceStore | None = None  # finished script segments, for a resubmission (--script-cache-bytes)

    def unavailable(self) -> RequestError | None:
        """Why the server takes no work now (a 503, for /health and every request alike), or None."""
        if self.draining:
            return RequestError(503, "the server is shutting down; retry on another", code="shutting_down",
                                kind="server_error")
        if self.model is None:
            return RequestError(503, "the model is still loading; retry shortly", code="model_not_ready",
                                kind="server_error")
        if self.model.engine.dead:
            return RequestError(503, "the decoding engine has stopped; restart the server", code="engine_down",
                                kind="server_error")
        return None

    def admit(self) -> LoadedModel:
        """A request in flight until release(), the same rule for every door (codes/serve/core/lifecycle.py);
        503 or 429 (past --max-concurrent) before any work."""
        model = self.ready()
        if self.in_flight >= self.config.limits.max_concurrent:
            raise too_busy(self.config.limits)
        self.in_flight += 1
        return model

    def release(self) -> None:
        self.in_flight -= 1

    def admit_script(self) -> LoadedModel:
        """A script in flight until release_script(): a request as any other, and one of --max-scripts."""
        limits = self.config.limits
        if self.scripts >= limits.max_scripts:
            self.ready()
            raise RequestError(429, f"the server is speaking {limits.max_scripts} scripts, the most "
                                    f"{flag('max_scripts')} allows; retry when one has ended",
                               code="rate_limit_exceeded", kind="rate_limit_error")
        model = self.admit()
        self.scripts += 1
        return model

    def release_script(self) -> None:
        self.scripts -= 1
        self.release()

    def ready(self) -> LoadedModel:
        error = self.unavailable()
        if error is not None:
            raise error
        return self.model
