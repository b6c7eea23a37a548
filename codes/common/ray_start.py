"""Joining a Ray cluster or starting a local one, for the commands that run on Ray (corpus.py, serve.py --ray).

A local Ray gets this checkout on its workers' PYTHONPATH; a cluster's workers get the `codes` package
shipped from here (the build and the data must be at the same paths on every node). A failure is one
UserError line.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from codes.common.errors import UserError
from codes.common.quiet import library_output

ROOT = Path(__file__).resolve().parents[2]


def start_ray(address: str | None, verbose: bool = False, log_to_driver: bool | None = None, **local) -> None:
    """ray.init on `address` (None: a new local Ray, given `local`'s settings such as num_cpus)."""
    import ray

    if not verbose:
        # Ray's C++ side would print per-actor notices to this console; its log files keep the rest.
        os.environ.setdefault("RAY_BACKEND_LOG_LEVEL", "fatal")
    settings = dict(include_dashboard=False, log_to_driver=verbose if log_to_driver is None else log_to_driver,
                    logging_level=logging.INFO if verbose else logging.ERROR)
    if address:
        settings.update(address=address, runtime_env={"py_modules": [str(ROOT / "codes")]})
    else:
        # The caller's own PYTHONPATH stays after this checkout, as it is in this process.
        path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        settings.update(address="local", runtime_env={"env_vars": {"PYTHONPATH": path}}, **local)
    with library_output("ray.init"):  # Ray's start-up notices; a failure is our one line below
        try:
            ray.init(**settings)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            if not address:
                raise UserError(f"cannot start a local Ray: {ray_cause(exc)}") from None
            raise UserError(f"cannot join the Ray cluster at {address}: {ray_cause(exc)}; check the address, "
                            "and for a cluster with token authentication set RAY_AUTH_MODE=token") from None


def ray_cause(exc: BaseException) -> str:
    """The last line of an error: Ray's wrapped errors end with the cause."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def actor_resources(actors: int | None, threads: int, gpus: float | None, provider: str | None) -> tuple[int, int, float]:
    """(actors, threads each, GPUs each) that fit the cluster: actors None as many as its CPUs (or GPUs) allow;
    gpus None: one each where the provider is CUDA. Too many is a UserError naming the flags to lower."""
    import ray

    cluster = ray.cluster_resources()
    cpus, gpus_there = int(cluster.get("CPU", 0)), cluster.get("GPU", 0)
    if gpus is None:
        gpus = 1.0 if provider == "cuda" else 0.0
    if actors is None:
        actors = int(gpus_there // gpus) if gpus else cpus // threads
    if actors < 1 or actors * threads > cpus:
        raise UserError(f"{max(actors, 1)} actor(s) x {threads} thread(s) need {max(actors, 1) * threads} CPUs and "
                        f"Ray has {cpus}; lower --actors or --threads-per-actor")
    if gpus and actors * gpus > gpus_there:
        raise UserError(f"{actors} actor(s) x {gpus:g} GPU(s) need {actors * gpus:g} GPUs and Ray has {gpus_there:g}; "
                        "lower --actors or --gpus-per-actor")
    return actors, threads, gpus
