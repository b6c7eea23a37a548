"""One Ray Serve replica: the whole server (create_app's guarded app over one LoadedModel) in one Ray actor.

Imported only inside Ray (the module imports ray); codes/serve/launch/deployment.py deploys it. The replica
builds its state and loads its model in its constructor, so Ray Serve counts it up only once it can
speak; the ASGI app is built after that (`__serve_build_asgi_app__`), and the FastAPI routes, the
guard's limits and the error envelope are the same code as plain serve.py's.
"""

from __future__ import annotations

import logging
import sys
import time

from ray import serve

from codes.serve.doors.http import create_app
from codes.serve.launch.startup import ServiceOptions, doors, load_model, pins_summary, service_state

logger = logging.getLogger("omnivoice.serve")


@serve.ingress()
class OmniVoiceReplica:
    def __init__(self, options: ServiceOptions):
        if not logging.getLogger().handlers:  # the request log lines, on the replica's stderr (and the driver's)
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
        logging.getLogger("omnivoice.serve").setLevel(logging.INFO)
        start = time.perf_counter()
        self.options = options.for_replica(serve.get_replica_context().replica_id.unique_id)
        self.state = service_state(self.options)
        self.state.model = load_model(self.options, self.state.voices)
        logger.info("replica %s ready (%s, loaded in %.1f s; %s)", self.options.replica, self.options.model_dir.name,
                    time.perf_counter() - start, pins_summary(self.state))

    def __serve_build_asgi_app__(self):
        return create_app(self.state, doors(self.options, self.state))

    def check_health(self) -> None:
        """Ray Serve replaces a replica whose engine has stopped (it would answer 503 to everything)."""
        error = self.state.unavailable()
        if error is not None and error.code == "engine_down":
            raise RuntimeError(f"replica {self.options.replica}: {error.message}")

    def __del__(self):
        state = getattr(self, "state", None)
        if state is not None and state.model is not None:
            state.model.stop()
