"""uvicorn's server, told the service is draining when it is asked to stop (SIGTERM, Ctrl-C)."""

from __future__ import annotations

import logging

import uvicorn

logger = logging.getLogger("omnivoice.serve")


class DrainingServer(uvicorn.Server):
    """On SIGTERM: /health and new requests get 503 while running requests finish, for up to the
    config's timeout_graceful_shutdown (--drain-seconds); uvicorn then ends the rest, which log
    status=shutdown."""

    def __init__(self, state, config: uvicorn.Config):
        super().__init__(config)
        self.state = state

    def handle_exit(self, sig, frame) -> None:
        if not self.state.draining:
            self.state.draining = True
            logger.info("shutting down: %d request(s) in flight have up to %g s to finish", self.state.in_flight,
                        self.config.timeout_graceful_shutdown)
        super().handle_exit(sig, frame)
