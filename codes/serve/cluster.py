"""serve.py --ray: the same server as Ray Serve replicas behind Ray's HTTP proxy, on a local Ray or a cluster.

One deployment of codes/serve/replica.py: each replica is a whole server (one model, one step
engine), Ray's proxy listens on --host/--port and routes each request to a replica, Ray Serve
replaces a replica whose process dies and, with --min/--max-replicas, adds and removes replicas
to keep about --max-batch requests on each. Saved voices and design pins live in --voices_dir,
read from disk on every use, so every replica sees a voice saved through any one of them (on a
cluster, the build and --voices_dir must be at the same path on every node: shared storage).
The command prints its ready line once the deployment answers /health through the proxy, and on
Ctrl-C or SIGTERM deletes what it deployed and stops the Ray it started (docs/DESIGN.md §replicas).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import signal
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace

from codes.common.errors import UserError
from codes.common.ray_start import ROOT, ray_cause, start_ray
from codes.serve.proxy_errors import IMPORT_PATH as PROXY_ERRORS
from codes.serve.startup import ServiceOptions, service_options

logger = logging.getLogger("omnivoice.serve")

APP_NAME = "omnivoice"
DEPLOYMENT_NAME = "OmniVoice"
READY_TIMEOUT_S = 900.0  # replicas load and warm their model before they count as up
CONSTRUCTOR_RETRIES = 3  # a replica that cannot load its model fails the deployment after this many tries
CLUSTER_FLAGS = ("--address", "--replicas", "--min-replicas", "--max-replicas", "--gpus-per-replica")


def add_cluster_flags(group) -> None:
    group.add_argument("--ray", action="store_true",
                       help="serve on Ray Serve: replicas of the server behind Ray's HTTP proxy on --host/--port")
    group.add_argument("--address", help="join this Ray cluster (e.g. auto, or HEAD_IP:6379); default: a local Ray")
    group.add_argument("--replicas", type=int, help="a fixed number of replicas (default: 1)")
    group.add_argument("--min-replicas", dest="min_replicas", type=int,
                       help="autoscale from this many replicas (with --max-replicas), keeping about --max-batch "
                            "requests in flight on each")
    group.add_argument("--max-replicas", dest="max_replicas", type=int, help="autoscale up to this many replicas")
    group.add_argument("--gpus-per-replica", dest="gpus_per_replica", type=float,
                       help="GPUs each replica reserves (with --provider cuda; fractions share one)")


@dataclass(frozen=True)
class Scaling:
    """How many replicas, and what each reserves from Ray."""

    replicas: int | None  # fixed; None when autoscaling
    min_replicas: int
    max_replicas: int
    threads: int
    gpus: float

    @property
    def autoscaling(self) -> bool:
        return self.replicas is None

    def describe(self) -> str:
        count = f"{self.replicas} replica(s)" if not self.autoscaling else \
            f"{self.min_replicas} to {self.max_replicas} replicas"
        gpus = f", {self.gpus:g} GPU" if self.gpus else ""
        return f"{count} x {self.threads} thread(s){gpus}"


def check_cluster_flags(args: argparse.Namespace) -> None:
    """Cluster flags only with --ray, and in combinations that mean one thing (UserError otherwise)."""
    if not args.ray:
        given = [flag for flag in CLUSTER_FLAGS if getattr(args, flag[2:].replace("-", "_")) is not None]
        if given:
            raise UserError(f"{', '.join(given)} need(s) --ray (serving on Ray Serve); add --ray or drop them")
        return
    scaling(args)


def scaling(args: argparse.Namespace) -> Scaling:
    auto = (args.min_replicas, args.max_replicas)
    if args.replicas is not None and any(value is not None for value in auto):
        raise UserError("--replicas is a fixed count; for autoscaling give --min-replicas and --max-replicas "
                        "instead, not both")
    if (args.min_replicas is None) != (args.max_replicas is None):
        raise UserError("autoscaling needs both --min-replicas and --max-replicas")
    for name, value in (("--replicas", args.replicas), ("--max-replicas", args.max_replicas)):
        if value is not None and value < 1:
            raise UserError(f"{name} must be >= 1, got {value}")
    if args.min_replicas is not None:
        if args.min_replicas < 1:
            raise UserError(f"--min-replicas must be >= 1 (a replica loads its model before it serves; "
                            f"none would leave no one to answer), got {args.min_replicas}")
        if args.min_replicas > args.max_replicas:
            raise UserError(f"--min-replicas {args.min_replicas} is more than --max-replicas {args.max_replicas}")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be >= 1, got {args.threads}")
    gpus = args.gpus_per_replica
    if gpus is not None:
        if args.provider != "cuda":
            raise UserError("--gpus-per-replica needs --provider cuda (a CPU replica reserves no GPU)")
        if not 0 < gpus:
            raise UserError(f"--gpus-per-replica must be > 0, got {gpus:g}")
    fixed = None if args.min_replicas is not None else (args.replicas or 1)
    return Scaling(fixed, args.min_replicas or fixed, args.max_replicas or fixed, args.threads or 1, gpus or 0.0)


def serve_on_ray(args: argparse.Namespace) -> int:
    """Deploy, print the ready line, serve until Ctrl-C or SIGTERM, then remove what was deployed."""
    plan = scaling(args)
    options = service_options(args)
    options = replace(options, threads=plan.threads, model_dir=options.model_dir.resolve(),
                      higgs_dir=options.higgs_dir and options.higgs_dir.resolve(), voices_dir=options.voices_dir.resolve())
    try:  # here too, so a folder that cannot be used is one line before any replica starts
        options.voices_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"cannot use --voices_dir {options.voices_dir} ({exc.strerror}); choose another folder") from None
    if not args.address:
        _check_fits_locally(plan)
    # Replicas' request lines reach this console (stderr) as they are: no colour codes, none folded as repeats.
    os.environ.setdefault("RAY_COLOR_PREFIX", "0")
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    try:
        from ray import serve
    except ImportError:
        raise UserError("serve.py --ray needs Ray Serve: pip install -r requirements.txt (it pins ray[serve])") from None
    import ray

    stop = threading.Event()
    start = time.perf_counter()
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    signal.signal(signal.SIGTERM, _interrupt)  # while starting, SIGTERM unwinds as Ctrl-C does: Ray is stopped
    try:
        start_ray(args.address, log_to_driver=True, **({} if args.address else {"num_cpus": os.cpu_count()}))
        started_serve = _start_serve(serve, args.host, args.port)
        try:
            _deploy(serve, options, plan)
            url = f"http://{args.host}:{args.port}"
            _wait_healthy(_probe_url(args.host, args.port), stop)
            for sig in (signal.SIGINT, signal.SIGTERM):
                signal.signal(sig, lambda *_: stop.set())
            print(f"ready: {url} ({options.model_dir.name} on Ray Serve, {plan.describe()}, up in "
                  f"{time.perf_counter() - start:.1f} s; voices in {options.voices_dir})", flush=True)
            while not stop.wait(0.5):
                pass
            logger.info("shutting down: replicas have up to %g s to finish their requests",
                        options.limits.drain_seconds)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave Ray half stopped
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            if started_serve:
                serve.shutdown()
            else:  # Serve was there before this command: remove only its own application
                serve.delete(APP_NAME)
    finally:
        ray.shutdown()  # disconnects from a cluster; stops a local Ray this command started
    return 0


def _interrupt(*_) -> None:
    raise KeyboardInterrupt


def _check_fits_locally(plan: Scaling) -> None:
    cores = os.cpu_count() or 1
    first = plan.replicas or plan.min_replicas
    if first * plan.threads > cores:
        raise UserError(f"{first} replica(s) x {plan.threads} thread(s) need {first * plan.threads} CPUs; this "
                        f"machine has {cores}: lower --replicas/--min-replicas or --threads, or join a cluster "
                        "with --address")


def _start_serve(serve, host: str, port: int) -> bool:
    """Serve's controller and HTTP proxy on host:port; False when Serve already ran on this cluster."""
    from ray.serve.context import _get_global_client
    from ray.serve.exceptions import RayServeException

    try:
        client = _get_global_client()
    except RayServeException:
        client = None
    if client is not None:
        if APP_NAME in serve.status().applications:
            raise UserError(f"a Serve application named {APP_NAME!r} already runs on this Ray cluster; "
                            f"stop it first (serve shutdown, or the serve.py --ray that started it)")
        # (Serve keeps its proxy's host and port; serve.start warns when ours differ.)
    # The proxy (started by the controller, whose environment it inherits) answers its own errors in
    # OpenAI's envelope; on a cluster it imports them from this checkout's path on its node.
    env = {"RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": PROXY_ERRORS, "PYTHONPATH": str(ROOT)}
    serve.start(http_options={"host": host, "port": port}, controller_options={"runtime_env": {"env_vars": env}},
                logging_config={"log_level": "WARNING", "enable_access_log": False})  # the replicas' own lines say more
    return client is None


def _deploy(serve, options: ServiceOptions, plan: Scaling) -> None:
    from codes.serve.replica import OmniVoiceReplica

    config = dict(
        name=DEPLOYMENT_NAME,
        ray_actor_options={"num_cpus": plan.threads, "num_gpus": plan.gpus},
        # Ray queues past this rather than the replica's own 429: the router then picks a less busy replica.
        max_ongoing_requests=options.limits.max_concurrent,
        graceful_shutdown_timeout_s=options.limits.drain_seconds,
        max_constructor_retry_count=CONSTRUCTOR_RETRIES,
        logging_config={"enable_access_log": False},  # the replica's own request line says more
    )
    if plan.autoscaling:
        config["autoscaling_config"] = {"min_replicas": plan.min_replicas, "initial_replicas": plan.min_replicas,
                                        "max_replicas": plan.max_replicas,
                                        "target_ongoing_requests": options.max_batch}
    else:
        config["num_replicas"] = plan.replicas
    deployment = serve.deployment(OmniVoiceReplica).options(**config)
    try:
        serve.run(deployment.bind(options), name=APP_NAME, route_prefix="/", blocking=False)
    except Exception as exc:  # a replica that could not load: say why in its own words where Ray kept them
        raise UserError(f"the replicas did not start: {_replica_error(serve) or ray_cause(exc)}") from None


def _replica_error(serve) -> str | None:
    """The one-line UserError a replica's constructor raised, from the deployment's status, if any."""
    try:
        message = serve.status().applications[APP_NAME].deployments[DEPLOYMENT_NAME].message
    except Exception:
        return None
    found = re.findall(r"UserError: (.+)", message or "")
    return found[-1].strip() if found else None


def _probe_url(host: str, port: int) -> str:
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}/health"


def _wait_healthy(url: str, stop: threading.Event) -> None:
    """Until /health answers 200 through Ray's proxy (it learns the route a little after serve.run)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    last = "no answer"
    while time.monotonic() < deadline and not stop.is_set():
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200 and json.load(response).get("status") == "ok":
                    return
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            last = str(exc)
        time.sleep(0.25)
    raise UserError(f"the deployment did not answer {url} with 200 ({last})")
