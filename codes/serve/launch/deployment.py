"""serve.py --ray: the same server as Ray Serve replicas behind Ray's HTTP proxy, on a local Ray or a cluster.

One deployment of codes/serve/launch/replica.py: each replica is a whole server (one model, one step
engine), Ray's proxy listens on --host/--port and routes each request to a replica, Ray Serve
replaces a replica whose process dies and, with --min/--max-replicas, adds and removes replicas
to keep about --max-batch requests on each. Saved voices and design pins live in --voices_dir,
read from disk on every use, so every replica sees a voice saved through any one of them (on a
cluster, the build and --voices_dir must be at the same path on every node: shared storage).
The command prints its ready line once every replica has answered /health through the proxy (so
the proxy routes to all of them), and on Ctrl-C or SIGTERM deletes its own application, shuts
Serve down only if it started Serve and no other application runs there, and stops the Ray it
started (docs/DESIGN.md §replicas).

On a shared cluster (--address) the application sits beside any others on its own --route-prefix.
Which serve.py deployed it is kept in Ray's key-value store (job id, pid, host): a later run that
finds the application of a run that died without stopping it (SIGKILL, a lost machine) replaces
it and says so; one whose owner is alive is refused.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import re
import signal
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace

from codes.common.errors import UserError
from codes.common.ray_start import ROOT, ray_cause, start_ray
from codes.serve.doors.guard import REPLICA_HEADER  # every answer of a replica's names it
from codes.serve.edge.limits import Limits
from codes.serve.edge.proxy_errors import IMPORT_PATH as PROXY_ERRORS
from codes.serve.edge.proxy_errors import ROUTE_ENV
from codes.serve.launch.startup import ServiceOptions, service_options, voice_book

logger = logging.getLogger("omnivoice.serve")

APP_NAME = "omnivoice"
DEPLOYMENT_NAME = "OmniVoice"
READY_TIMEOUT_S = 900.0  # replicas load and warm their model before they count as up
CONSTRUCTOR_RETRIES = 3  # a replica that cannot load its model fails the deployment after this many tries
CLUSTER_FLAGS = ("--address", "--replicas", "--min-replicas", "--max-replicas", "--gpus-per-replica",
                 "--route-prefix", "--max-queued-requests")
MAX_QUEUED_REQUESTS = 64  # requests Ray's proxy holds for busy replicas before it answers 429
RETRY_AFTER_S = 1.0  # the Retry-After of that 429
PROXY_READY_ENV, PROXY_READY_SECONDS = "RAY_SERVE_PROXY_READY_CHECK_TIMEOUT_S", "60"  # each of Ray's 3 checks of a new proxy
OWNER_NAMESPACE = "omnivoice"  # Ray's key-value store: who deployed the application
# Extra Ray Serve autoscaling settings as a JSON object, e.g. {"upscale_delay_s": 1, "downscale_delay_s": 2}:
# for tests and tuning (Serve's defaults wait 30 s before adding a replica and 600 s before removing one).
AUTOSCALING_ENV = "OMNIVOICE_SERVE_AUTOSCALING"


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
    group.add_argument("--route-prefix", dest="route_prefix",
                       help="the path the application answers under on Ray's proxy, beside other applications "
                            "on a shared cluster (default: /; e.g. /omnivoice, then the API is /omnivoice/v1)")
    group.add_argument("--max-queued-requests", dest="max_queued_requests", type=int,
                       help="requests Ray's proxy holds while every replica has --max-concurrent in flight; "
                            f"beyond, 429 (default: {MAX_QUEUED_REQUESTS})")


@dataclass(frozen=True)
class Scaling:
    """How many replicas, and what each reserves from Ray."""

    replicas: int | None  # fixed; None when autoscaling
    min_replicas: int
    max_replicas: int
    threads: int
    gpus: float
    route_prefix: str = "/"
    max_queued: int = MAX_QUEUED_REQUESTS
    autoscaling_extra: dict | None = None  # from $OMNIVOICE_SERVE_AUTOSCALING

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
    gpus = args.gpus_per_replica
    if gpus is not None:
        if args.provider != "cuda":
            raise UserError("--gpus-per-replica needs --provider cuda (a CPU replica reserves no GPU)")
        if not 0 < gpus:
            raise UserError(f"--gpus-per-replica must be > 0, got {gpus:g}")
    route = args.route_prefix or "/"
    if not re.fullmatch(r"/|(/[A-Za-z0-9._~-]+)+", route):
        raise UserError(f"--route-prefix must be a path such as /omnivoice (letters, digits, '._~-' between "
                        f"slashes, no slash at the end), got {route!r}")
    max_queued = MAX_QUEUED_REQUESTS if args.max_queued_requests is None else args.max_queued_requests
    if max_queued < 1:
        raise UserError(f"--max-queued-requests must be >= 1, got {max_queued}")
    fixed = None if args.min_replicas is not None else (args.replicas or 1)
    return Scaling(fixed, args.min_replicas or fixed, args.max_replicas or fixed, args.threads or 1, gpus or 0.0,
                   route, max_queued, _autoscaling_extra() if fixed is None else None)


def _autoscaling_extra() -> dict | None:
    text = os.environ.get(AUTOSCALING_ENV, "").strip()
    if not text:
        return None
    try:
        extra = json.loads(text)
    except ValueError:
        extra = None
    if not isinstance(extra, dict):
        raise UserError(f"${AUTOSCALING_ENV} must be a JSON object of Ray Serve autoscaling settings, e.g. "
                        f'{{"upscale_delay_s": 1}}, got {text[:60]!r}')
    return extra


def serve_on_ray(args: argparse.Namespace) -> int:
    """Deploy, print the ready line, serve until Ctrl-C or SIGTERM, then remove what was deployed."""
    plan = scaling(args)
    options = service_options(args)
    options = replace(options, threads=plan.threads, model_dir=options.model_dir.resolve(),
                      higgs_dir=options.higgs_dir and options.higgs_dir.resolve(), voices_dir=options.voices_dir.resolve(),
                      asr_dir=options.asr_dir and options.asr_dir.resolve(),
                      voices_from=tuple(folder.resolve() for folder in options.voices_from))
    voice_book(options.voices_dir)  # here too, so a folder that cannot be used is one line before any replica starts
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

    signals = _Signals()
    start = time.perf_counter()
    logging.getLogger("ray.serve").setLevel(logging.WARNING)
    try:
        logger.info("starting: Ray at %s", args.address or "a local Ray on this machine's cores")
        start_ray(args.address, log_to_driver=True, **({} if args.address else {"num_cpus": os.cpu_count()}))
        signals.checkpoint()
        started_serve, port = _start_serve(serve, args.host, args.port, plan.route_prefix, options.limits)
        deployed = False
        try:
            signals.checkpoint()
            _claim_app(serve, plan.route_prefix)
            deployed = True
            logger.info("starting: deploying %s", plan.describe())
            _deploy(serve, options, plan)
            signals.checkpoint()
            route = "" if plan.route_prefix == "/" else plan.route_prefix
            url = f"http://{args.host}:{port}{route}"
            logger.info("starting: waiting for %d replica(s) to answer", plan.replicas or plan.min_replicas)
            _wait_ready(_probe_url(args.host, port, route), plan.replicas or plan.min_replicas, signals.stop)
            signals.checkpoint()
            signals.started()
            print(f"ready: {url} ({options.model_dir.name} on Ray Serve, {plan.describe()}, up in "
                  f"{time.perf_counter() - start:.1f} s; voices in {options.voices_dir})", flush=True)
            while not signals.stop.wait(0.5):
                pass
            logger.info("shutting down: replicas have up to %g s to finish their requests",
                        options.limits.drain_seconds)
        finally:
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not leave Ray half stopped
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            _remove(serve, deployed, started_serve)
    finally:
        ray.shutdown()  # disconnects from a cluster; stops a local Ray this command started
    return 0


def _remove(serve, deployed: bool, started_serve: bool) -> None:
    """Delete this command's application; stop Serve only if this command started it and nothing else runs there
    (another application deployed onto it meanwhile keeps running)."""
    import ray

    owner = _owner_record() if deployed else None
    # A later run that took the application over (this one looked dead to it) keeps it.
    if owner is None or owner.get("job") == ray.get_runtime_context().get_job_id():
        if deployed:
            serve.delete(APP_NAME)
            _owner_record(delete=True)
    if started_serve and not serve.status().applications:
        serve.shutdown()


class _Signals:
    """Ctrl-C and SIGTERM from the command's first step to its last. Each sets `stop`; while starting, each also
    unwinds the start as KeyboardInterrupt, and the start checks `stop` between its steps, so a signal whose
    KeyboardInterrupt a library call swallowed (Ray's, during a start that waits on a cluster) still ends the
    run. Once serving, a signal only sets `stop`: the serving loop ends and the application is removed."""

    def __init__(self):
        self.stop = threading.Event()
        self._starting = True
        self._previous = {sig: signal.signal(sig, self._received) for sig in (signal.SIGINT, signal.SIGTERM)}

    def _received(self, signum, frame) -> None:
        self.stop.set()
        if self._starting:
            raise KeyboardInterrupt

    def checkpoint(self) -> None:
        """Between two steps of the start: a signal that came during the last one ends it here. Ray's calls may
        put their own handlers in; ours go back."""
        for sig in self._previous:
            if signal.getsignal(sig) is not self._received:
                signal.signal(sig, self._received)
        if self.stop.is_set():
            raise KeyboardInterrupt

    def started(self) -> None:
        self._starting = False


def _check_fits_locally(plan: Scaling) -> None:
    cores = os.cpu_count() or 1
    first = plan.replicas or plan.min_replicas
    if first * plan.threads > cores:
        raise UserError(f"{first} replica(s) x {plan.threads} thread(s) need {first * plan.threads} CPUs; this "
                        f"machine has {cores}: lower --replicas/--min-replicas or --threads, or join a cluster "
                        "with --address")


def _start_serve(serve, host: str, port: int, route_prefix: str, limits: Limits) -> tuple[bool, int]:
    """Serve's controller and HTTP proxy on host:port: (whether this command started Serve, the proxy's port).
    Serve already running on the cluster keeps its own proxy, port and settings."""
    from ray.serve.context import _get_global_client
    from ray.serve.exceptions import RayServeException

    try:
        client = _get_global_client()
    except RayServeException:
        client = None
    if client is not None:
        there = client.http_config.port
        if there != port:
            logger.info("Ray Serve already runs on this cluster with its proxy on port %d: serving there, "
                        "not on --port %d", there, port)
        # Ray takes a deployment's queue-full status and Retry-After, never its body; the proxy's middleware
        # and HTTP settings are fixed when Serve starts (docs/DESIGN.md §replicas).
        logger.info("note: Ray Serve was already running; unless its proxies load codes/serve/edge/proxy_errors.py "
                    "(a serve.py --ray that started Serve has them do so), their own answers (429 when its queue "
                    "is full, 503, 408) are Ray's plain text, not OpenAI's error envelope, and they keep their own "
                    "keep-alive (docs/ray.md)")
        return False, there
    # The proxy (started by the controller, whose environment it inherits) answers its own errors in
    # OpenAI's envelope, for paths under our route only; on a cluster it imports them from this
    # checkout's path on its node.
    env = {"RAY_SERVE_HTTP_PROXY_CALLBACK_IMPORT_PATH": PROXY_ERRORS, "PYTHONPATH": str(ROOT),
           ROUTE_ENV: route_prefix}
    # Ray gives a new proxy 3 readiness checks of 5 s, then kills it and the start fails; on a small host
    # busy with other work its imports alone take longer (measured: 40 s on 2 loaded cores).
    env[PROXY_READY_ENV] = os.environ.get(PROXY_READY_ENV, PROXY_READY_SECONDS)
    # Ray's proxy builds its own uvicorn server: of our HTTP bounds its HTTPOptions take only the keep-alive
    # (docs/DESIGN.md §http-bounds).
    http = {"host": host, "port": port, "keep_alive_timeout_s": math.ceil(limits.keep_alive_seconds)}
    serve.start(http_options=http, controller_options={"runtime_env": {"env_vars": env}},
                logging_config={"log_level": "WARNING", "enable_access_log": False})  # the replicas' own lines say more
    return True, port


def _claim_app(serve, route_prefix: str) -> None:
    """Make APP_NAME this command's: refuse one another live serve.py (or anything else) runs, replace one whose
    serve.py died without stopping it (SIGKILL, a lost machine), and record this command as its owner."""
    import ray

    if APP_NAME in serve.status().applications:
        owner = _owner_record()
        if owner is None:
            raise UserError(f"a Serve application named {APP_NAME!r} that serve.py did not deploy runs on this "
                            "Ray cluster; stop it first (serve shutdown, or serve.delete)")
        who = f"pid {owner.get('pid')} on {owner.get('host')}"
        if _job_alive(owner.get("job")):
            raise UserError(f"serve.py --ray ({who}) already serves {APP_NAME!r} on this Ray cluster; stop it "
                            "first (Ctrl-C there), or join another cluster")
        print(f"replacing the {APP_NAME!r} application left on this Ray cluster by a serve.py --ray that ended "
              f"without stopping it ({who})", flush=True)
    _owner_record(value={"job": ray.get_runtime_context().get_job_id(), "pid": os.getpid(),
                         "host": socket.gethostname(), "route_prefix": route_prefix})


def _owner_record(value: dict | None = None, delete: bool = False) -> dict | None:
    """Read (no arguments), write (value) or delete who deployed APP_NAME, in Ray's key-value store (the GCS)."""
    from ray.experimental import internal_kv

    key = f"serve.py --ray/{APP_NAME}".encode()
    if delete:
        internal_kv._internal_kv_del(key, namespace=OWNER_NAMESPACE)
        return None
    if value is not None:
        internal_kv._internal_kv_put(key, json.dumps(value).encode(), overwrite=True, namespace=OWNER_NAMESPACE)
        return value
    found = internal_kv._internal_kv_get(key, namespace=OWNER_NAMESPACE)
    try:
        return json.loads(found) if found else None
    except ValueError:
        return None


def _job_alive(job_id: str | None) -> bool:
    """Whether a Ray job (a driver such as serve.py) still runs: Ray marks it dead when its process ends, however."""
    try:
        from ray._private.state import jobs  # Ray's own job table; no public API reads it without the dashboard

        found = jobs()
    except Exception:  # a Ray whose private API moved: refusing a live owner's application beats replacing it
        return True
    return any(job.get("JobID") == job_id and not job.get("IsDead") for job in found)


def _deploy(serve, options: ServiceOptions, plan: Scaling) -> None:
    from codes.serve.launch.replica import OmniVoiceReplica

    from ray.serve.config import BackpressureConfig

    config = dict(
        name=DEPLOYMENT_NAME,
        ray_actor_options={"num_cpus": plan.threads, "num_gpus": plan.gpus},
        # Ray queues past this rather than the replica's own 429: the router then picks a less busy replica.
        max_ongoing_requests=options.limits.max_concurrent,
        # ... up to this many, then Serve's own 429 (proxy_errors.py gives it OpenAI's envelope).
        max_queued_requests=plan.max_queued,
        backpressure_config=BackpressureConfig(status_code=429, retry_after_s=RETRY_AFTER_S),
        graceful_shutdown_timeout_s=options.limits.drain_seconds,
        max_constructor_retry_count=CONSTRUCTOR_RETRIES,
        logging_config={"enable_access_log": False},  # the replica's own request line says more
    )
    if plan.autoscaling:
        config["autoscaling_config"] = {"min_replicas": plan.min_replicas, "initial_replicas": plan.min_replicas,
                                        "max_replicas": plan.max_replicas,
                                        "target_ongoing_requests": options.max_batch,
                                        **(plan.autoscaling_extra or {})}
    else:
        config["num_replicas"] = plan.replicas
    try:
        deployment = serve.deployment(OmniVoiceReplica).options(**config)
    except (ValueError, TypeError) as exc:  # $OMNIVOICE_SERVE_AUTOSCALING with a setting Serve does not take
        raise UserError(f"Ray Serve refused the deployment's settings: {ray_cause(exc)}") from None
    try:
        serve.run(deployment.bind(options), name=APP_NAME, route_prefix=plan.route_prefix, blocking=False)
    except Exception as exc:  # a replica that could not load: say why in its own words where Ray kept them
        taken = re.search(r'Prefix (\S+) is being used by application "([^"]+)"', str(exc))
        if taken:
            raise UserError(f"the route {taken[1]} is taken by the application {taken[2]!r} on this Ray cluster; "
                            "give ours its own with --route-prefix, e.g. --route-prefix /omnivoice") from None
        raise UserError(f"the replicas did not start: {_replica_error(serve) or ray_cause(exc)}") from None


def _replica_error(serve) -> str | None:
    """The one-line UserError a replica's constructor raised, from the deployment's status, if any."""
    try:
        message = serve.status().applications[APP_NAME].deployments[DEPLOYMENT_NAME].message
    except Exception:
        return None
    found = re.findall(r"UserError: (.+)", message or "")
    return found[-1].strip() if found else None


def _probe_url(host: str, port: int, route: str = "") -> str:
    shown = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)
    shown = f"[{shown}]" if ":" in shown else shown
    return f"http://{shown}:{port}{route}/health"


def _wait_ready(url: str, replicas: int, stop: threading.Event) -> None:
    """Until /health has answered 200 through Ray's proxy from `replicas` different replicas. Serve counts a
    replica up before the proxy routes to it: ready after the first answer once sent a burst all to one replica
    while the other stood idle. The router picks among the replicas it knows at random (the less busy of two),
    so probing until each has answered is a few probes more."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    answered: set[str] = set()
    last = "no answer"
    while time.monotonic() < deadline and not stop.is_set():
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                if response.status == 200 and json.load(response).get("status") == "ok":
                    answered.add(response.headers.get(REPLICA_HEADER) or "")
                    if len(answered) >= replicas:
                        return
                    last = f"{len(answered)} of {replicas} replicas answered"
                    time.sleep(0.05)
                    continue
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            last = str(exc)
        time.sleep(0.25)
    if stop.is_set():
        raise KeyboardInterrupt
    raise UserError(f"the deployment did not answer {url} with 200 from {replicas} replica(s) within "
                    f"{READY_TIMEOUT_S:g} s ({last})")
