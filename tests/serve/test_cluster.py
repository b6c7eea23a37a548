"""serve.py --ray on a real local Ray: two replicas of the tiny build behind Ray Serve's proxy, the official
openai client, a replica killed by its process id, and Ctrl-C that leaves no Ray process behind.

One deployment for the module (Ray and two models take ~20 s to start on two cores); the tests run in
file order and the last one stops it.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import ray.serve  # noqa: F401  (the serving environment has it: a missing Ray Serve fails here, never skips)

from helpers.scripts import last_error_line, run_script
from helpers.serving import FAST, TWO_SENTENCES, Server, pcm_samples, whole_response

HEADER = "x-omnivoice-replica"
KEEP_ALIVE_SECONDS = 2  # Ray's proxy keeps an idle connection 90 s unless told
LONG = " ".join(f"Sentence {i} of a request that is still being spoken when its replica dies." for i in range(4))


@pytest.fixture(scope="module")
def cluster(served_build, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    srv = Server(served_build, folder / "voices", folder / "server.log", "--ray", "--replicas", "2", "--threads", "1",
                 "--keep-alive-seconds", str(KEEP_ALIVE_SECONDS))
    srv.tree = _descendants(srv.proc.pid)  # Ray's processes, started by serve.py
    yield srv
    if srv.proc.poll() is None:  # a test failed before the last one stopped it: stop it the same way
        srv.proc.send_signal(signal.SIGINT)
        try:
            srv.proc.wait(timeout=60)
        except Exception:
            pass
    for pid, started in _descendants(srv.proc.pid).items() | srv.tree.items():
        if _alive(pid, started):
            os.kill(pid, signal.SIGKILL)
    srv.stop()


def _stat(pid: int) -> list[str] | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _descendants(root: int) -> dict[int, str]:
    """pid -> start time of every live process under `root`."""
    children: dict[int, list[int]] = {}
    starts = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
            starts[int(entry)] = fields[19]
    found, todo = {}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = starts[child]
            todo.append(child)
    return found


def _alive(pid: int, started: str) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z" and fields[19] == started  # not a new process with the pid


def raw_speech(srv: Server, text: str = TWO_SENTENCES, voice: str = "alloy", timeout: float = 60, **extra):
    """(replica header, pcm samples) of one request through the openai client."""
    response = srv.client(timeout=timeout).audio.speech.with_raw_response.create(
        model="omnivoice", input=text, voice=voice, response_format="pcm", extra_body={**FAST, **extra})
    return response.headers.get(HEADER), pcm_samples(response.content)


def pid_of(replica: str) -> int:
    name, pid = replica.rsplit("/", 1)
    assert name and pid.isdigit(), replica
    return int(pid)


def test_flags_that_mean_nothing_together_are_one_line_each(served_build):
    for args, message in ((("--replicas", "2"), "need(s) --ray"),
                          (("--ray", "--replicas", "2", "--min-replicas", "1", "--max-replicas", "3"), "not both"),
                          (("--ray", "--gpus-per-replica", "1"), "needs --provider cuda")):
        result = run_script("serve.py", "--model_dir", served_build, *args)
        assert result.returncode == 2 and message in last_error_line(result), result.stderr


def test_eight_concurrent_openai_requests_all_succeed_spread_over_both_replicas(cluster):
    assert cluster.ready_line.startswith(f"ready: {cluster.url} ") and "2 replica(s)" in cluster.ready_line
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda seed: raw_speech(cluster, seed=seed), range(8)))
    replicas = {replica for replica, _ in results}
    assert all(len(samples) > 24000 for _, samples in results)  # seconds of audio each
    assert len(replicas) == 2, replicas
    assert {pid_of(r) for r in replicas} <= set(cluster.tree)  # real processes, started under serve.py
    health = httpx.get(f"{cluster.url}/health", timeout=30)
    assert health.status_code == 200 and health.json()["status"] == "ok" and health.headers[HEADER] in replicas
    deadline = time.monotonic() + 30  # the replicas' request lines reach serve.py's stderr through Ray's log relay
    while time.monotonic() < deadline:
        logged = {line.get("replica") for line in cluster.request_lines() if line.get("status") == "ok"}
        if replicas <= logged:
            break
        time.sleep(0.5)
    assert replicas <= logged, logged


def test_rays_proxy_closes_an_idle_connection_after_keep_alive_seconds(cluster):
    import socket

    with socket.create_connection(("127.0.0.1", cluster.port), timeout=60) as sock:
        sock.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        answer = b""
        while not whole_response(answer):
            got = sock.recv(4096)
            assert got, answer
            answer += got
        answered = time.monotonic()
        assert answer.startswith(b"HTTP/1.1 200 ")
        sock.settimeout(60)
        assert sock.recv(4096) == b""  # closed by the proxy, the connection idle since its answer
    assert time.monotonic() - answered < KEEP_ALIVE_SECONDS + 10


def test_a_streamed_answer_streams_through_rays_proxy(cluster):
    """The first audio of twelve sentences reaches the client in the first half of the request: Ray's proxy
    passes the stream on as it comes, not the whole answer at the end. A share of the request's own time,
    so a fast or a loaded machine asks the same (the proxy's router sends /health to the idle replica, so
    the busy one cannot be asked)."""
    arrivals = []
    start = time.perf_counter()
    with cluster.client(timeout=120).audio.speech.with_streaming_response.create(
            model="omnivoice", input=" ".join([TWO_SENTENCES] * 6), voice="alloy", response_format="pcm",
            extra_body={"num_steps": 16}) as response:
        assert response.headers[HEADER]
        for chunk in response.iter_bytes():
            arrivals.append((time.perf_counter() - start, len(chunk)))
    first, last = arrivals[0][0], arrivals[-1][0]
    assert sum(size for _, size in arrivals) > 48000
    assert first < 0.5 * last, arrivals[:3] + arrivals[-3:]


def test_a_replica_refuses_a_foreign_web_page_as_plain_serve_py_does(cluster):
    for headers, code in (({"Origin": "http://evil.example"}, "origin_not_allowed"),
                          ({"Host": "evil.example"}, "host_not_allowed")):
        refused = httpx.get(f"{cluster.url}/v1/audio/voices", headers=headers, timeout=30)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == code, refused.text
        assert refused.headers[HEADER]  # a replica's guard answered, through Ray's proxy
    own = httpx.get(f"{cluster.url}/v1/audio/voices", headers={"Origin": cluster.url}, timeout=30)
    assert own.status_code == 200


def _on_other_replica(srv: Server, first: str, call, tries: int = 30):
    """Repeat `call` until a replica other than `first` answers it (Ray's router picks one of two each time)."""
    for _ in range(tries):
        replica, result = call()
        if replica != first:
            return replica, result
    raise AssertionError(f"{tries} requests all went to {first}")


def test_a_voice_saved_through_one_replica_speaks_through_the_other_and_design_pins_match(cluster):
    _, clip = raw_speech(cluster, text="A short clip to clone from.", voice="coral", seed=1)
    wav = _wav(clip)
    made = httpx.post(f"{cluster.url}/v1/audio/voices", data={"name": "shared", "text": "A short clip to clone from."},
                      files={"file": ("clip.wav", wav, "audio/wav")}, timeout=60)
    assert made.status_code == 200, made.text
    saver = made.headers[HEADER]
    other, samples = _on_other_replica(cluster, saver, lambda: raw_speech(cluster, voice="shared", seed=5))
    assert len(samples) > 24000
    _, on_saver = _on_other_replica(cluster, other, lambda: raw_speech(cluster, voice="shared", seed=5))
    np.testing.assert_array_equal(samples, on_saver)  # one voice file, read by both
    # A design voice is one pin on disk for every replica: the same seed speaks the same audio on each.
    first, design = raw_speech(cluster, voice="sage", seed=9)
    _, design_elsewhere = _on_other_replica(cluster, first, lambda: raw_speech(cluster, voice="sage", seed=9))
    np.testing.assert_array_equal(design, design_elsewhere)


def _wav(samples: np.ndarray) -> bytes:
    import io

    import soundfile

    out = io.BytesIO()
    soundfile.write(out, samples, 24000, format="WAV", subtype="PCM_16")
    return out.getvalue()


def _busy_replica(srv: Server, wait: float = 60) -> str | None:
    """A replica that reports a request in flight on /health within `wait` s. The proxy's router sends
    /health to the less busy replica, so with requests on both either may answer; with all on one, none."""
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        health = httpx.get(f"{srv.url}/health", timeout=30)
        if health.json().get("requests_in_flight", 0) > 0:
            return health.headers[HEADER]
        time.sleep(0.05)
    return None


def test_a_killed_replica_costs_only_its_own_requests_and_is_replaced(cluster):
    with ThreadPoolExecutor(4) as pool:  # at once, so the router spreads them: one after another may all go to one
        seen = {replica for replica, _ in pool.map(lambda seed: raw_speech(cluster, seed=seed), range(4))}
    assert len(seen) == 2, seen
    outcomes: list = []

    def in_flight(seed: int):
        try:
            replica, samples = raw_speech(cluster, text=LONG, seed=seed, num_steps=64, timeout=120)
            outcomes.append(("ok", replica))
        except openai.APIStatusError as exc:
            outcomes.append((exc.status_code, exc.body))
        except openai.APIConnectionError as exc:  # the stream was cut after its first audio
            outcomes.append(("cut", type(exc).__name__))

    workers = [threading.Thread(target=in_flight, args=(seed,)) for seed in range(4)]
    for worker in workers:
        worker.start()
    victim = _busy_replica(cluster)  # killed with a request of its own in flight
    assert victim in seen, f"no replica reported a request in flight: {victim}"
    survivor = (seen - {victim}).pop()
    os.kill(pid_of(victim), signal.SIGKILL)
    killed_at = time.monotonic()
    for worker in workers:
        worker.join(timeout=150)
    assert not any(worker.is_alive() for worker in workers), "a request hung on the dead replica"
    failed = [o for o in outcomes if o[0] != "ok"]
    assert failed, f"no request was in flight on the killed replica: {outcomes}"
    for outcome in failed:  # a 5xx in OpenAI's envelope, or (past the first audio) a cut stream
        assert outcome[0] == "cut" or (outcome[0] >= 500 and outcome[1]["code"] == "replica_lost"), outcome
    assert {replica for status, replica in outcomes if status == "ok"} <= {survivor, victim}

    # Sent after the kill: every one is served (by the survivor, until the replacement is up).
    with ThreadPoolExecutor(6) as pool:
        after = list(pool.map(lambda seed: raw_speech(cluster, seed=seed), range(6)))
    assert all(len(samples) > 24000 for _, samples in after)
    assert victim not in {replica for replica, _ in after}

    deadline = killed_at + 120  # Ray Serve starts a replacement: two replicas again, neither the dead one
    while time.monotonic() < deadline:
        now = {raw_speech(cluster)[0] for _ in range(4)}
        if len(now) == 2 and victim not in now:
            break
    assert len(now) == 2 and victim not in now, now


def test_ctrl_c_removes_the_deployment_and_every_ray_process_it_started(cluster):
    tree = _descendants(cluster.proc.pid)
    names = {Path(f"/proc/{pid}/comm").read_text().strip() for pid in tree if _alive(pid, tree[pid])}
    assert {"raylet", "gcs_server"} <= names, names
    cluster.proc.send_signal(signal.SIGINT)
    assert cluster.proc.wait(timeout=90) == 0, "\n".join(cluster.log_lines()[-20:])
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and any(_alive(pid, started) for pid, started in tree.items()):
        time.sleep(0.5)
    left = [pid for pid, started in tree.items() if _alive(pid, started)]
    assert not left, [Path(f"/proc/{pid}/cmdline").read_text()[:80] for pid in left]
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{cluster.url}/health", timeout=5)


# A shared cluster: a Ray head this module starts itself (`ray start --head`, its own temp dir and ports, two
# CPUs), the test process joined to it as a driver that reads `serve status` and deploys another application,
# and serve.py --ray --address runs on it one after another. The tests run in file order.

AUTOSCALING = {"upscale_delay_s": 0.5, "downscale_delay_s": 3, "metrics_interval_s": 0.5, "look_back_period_s": 2}
WAIT_S = 180  # the most any one event below is waited for (replicas load a model on two busy cores)
# Ray 2.59+ turns token authentication on when ~/.ray/auth_token exists: the same mode everywhere, on any machine.
NO_AUTH = {"RAY_AUTH_MODE": "disabled"}


class Shared:
    def __init__(self, build: Path, folder: Path, address: str):
        self.build, self.folder, self.address = build, folder, address
        self.servers: list[Server] = []
        self.serve_port: int | None = None  # Serve's proxy, once the first serve.py started it
        self.autoscaled: Server | None = None  # the run that started Serve, stopped by a later test

    def serve_py(self, name: str, *extra: str, env: dict | None = None) -> Server:
        """serve.py --ray --address on the head; once Serve runs, on its proxy's port (it keeps its own)."""
        srv = Server(self.build, self.folder / "voices", self.folder / f"{name}.log", "--ray", "--address",
                     self.address, "--threads", "1", *extra, env={**NO_AUTH, **(env or {})}, port=self.serve_port)
        self.servers.append(srv)
        self.serve_port = srv.port
        return srv


def _head_processes(temp: Path) -> dict[int, str]:
    """pid -> start time of the head's processes: those naming our own temp dir, and everything under them
    (the workers). Never another Ray on this machine."""
    roots = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))) is not None and fields[0] != "Z":
            try:
                named = str(temp) in Path(f"/proc/{entry}/cmdline").read_text(errors="replace")
            except OSError:
                continue
            if named:
                roots[int(entry)] = fields[19]
    found = dict(roots)
    for pid in roots:
        found.update(_descendants(pid))
    return found


@pytest.fixture(scope="module")
def shared(served_build, tmp_path_factory):
    import logging
    import shutil
    import shutil
    import subprocess
    import sys
    import tempfile

    import ray
    from helpers.serving import free_port

    temp = Path(tempfile.mkdtemp(prefix="rt", dir="/tmp"))  # short: Ray's socket paths must fit in 107 bytes
    port = free_port()
    ports = ["--port", port, "--ray-client-server-port", free_port(), "--node-manager-port", free_port(),
             "--object-manager-port", free_port(), "--dashboard-agent-listen-port", free_port(),
             "--dashboard-agent-grpc-port", free_port(), "--runtime-env-agent-port", free_port(),
             "--metrics-export-port", free_port()]
    ray_cli = str(Path(sys.executable).with_name("ray"))
    auth_before = os.environ.get("RAY_AUTH_MODE")
    os.environ.update(NO_AUTH)  # for this process's own connection, and `ray start`
    started = subprocess.run([ray_cli, "start", "--head", "--num-cpus", "2", "--node-ip-address", "127.0.0.1",
                              "--include-dashboard", "false", "--disable-usage-stats", "--temp-dir", str(temp),
                              *map(str, ports)], capture_output=True, text=True, timeout=180, start_new_session=True)
    head = Shared(served_build, tmp_path_factory.mktemp("shared-cluster"), f"127.0.0.1:{port}")
    try:
        assert started.returncode == 0, started.stdout + started.stderr
        ray.init(address=head.address, log_to_driver=False, logging_level=logging.ERROR)
        yield head
    finally:
        for srv in head.servers:
            if srv.proc.poll() is None:
                srv.proc.send_signal(signal.SIGINT)
                try:
                    srv.proc.wait(timeout=60)
                except Exception:
                    pass
            srv.stop()
        ray.shutdown()
        if auth_before is None:
            os.environ.pop("RAY_AUTH_MODE", None)
        else:
            os.environ["RAY_AUTH_MODE"] = auth_before
        for pid, start in _head_processes(temp).items():
            if _alive(pid, start):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def _serve_status():
    from ray import serve

    return serve.status().applications


def _running_replicas() -> int:
    app = _serve_status().get("omnivoice")
    return app.deployments["OmniVoice"].replica_states.get("RUNNING", 0) if app else 0


def _wait_for(what: str, check, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    raise AssertionError(f"waited {timeout:g} s for {what}")


def test_on_a_shared_cluster_a_burst_past_serves_queue_is_429_and_scales_up_and_idleness_scales_down(shared):
    from codes.serve.launch.deployment import AUTOSCALING_ENV

    srv = shared.serve_py("autoscaled", "--min-replicas", "1", "--max-replicas", "2", "--max-batch", "1",
                          "--max-concurrent", "1", "--max-queued-requests", "1",
                          env={AUTOSCALING_ENV: json.dumps(AUTOSCALING)})
    shared.autoscaled = srv
    assert "1 to 2 replicas" in srv.ready_line and _running_replicas() == 1

    def post(seed: int) -> httpx.Response:
        return httpx.post(f"{srv.url}/v1/audio/speech", timeout=120,
                          json={"model": "omnivoice", "input": LONG, "voice": "alloy", "response_format": "pcm",
                                "num_steps": 16, "seed": seed})

    with ThreadPoolExecutor(6) as pool:  # one replica: one in flight, one queued, the rest refused at once
        answers = list(pool.map(post, range(6)))
    refused = [a for a in answers if a.status_code == 429]
    assert refused and all(a.status_code in (200, 429) for a in answers), [a.status_code for a in answers]
    for answer in refused:  # Serve's own queue limit, in OpenAI's envelope, from Ray's proxy (no replica saw it)
        error = answer.json()["error"]
        assert error["code"] == "rate_limit_exceeded" and error["type"] == "rate_limit_error"
        assert "Ray's queue" in error["message"] and answer.headers["retry-after"] == "1"
        assert HEADER not in answer.headers
    assert all(len(a.content) > 24000 for a in answers if a.status_code == 200)

    # Load until Serve has brought up the second replica (a request at a time beyond one in flight).
    busy = threading.Event()

    def load():
        while not busy.is_set():
            post(0)

    loaders = [threading.Thread(target=load) for _ in range(2)]
    for loader in loaders:
        loader.start()
    try:
        _wait_for("the second replica under load", lambda: _running_replicas() == 2)
    finally:
        busy.set()
        for loader in loaders:
            loader.join(timeout=150)
    _wait_for("idleness to take the second replica down", lambda: _running_replicas() == 1)
    speech = httpx.post(f"{srv.url}/v1/audio/speech", timeout=120,
                        json={"model": "omnivoice", "input": "Still here.", "voice": "alloy", "response_format": "pcm",
                              "num_steps": 4})
    assert speech.status_code == 200


@pytest.fixture(scope="module")
def other_app(shared):
    """Another team's application on the same Serve: a plain function on its own route."""
    from ray import serve

    @serve.deployment(ray_actor_options={"num_cpus": 0})
    def other(request):
        return "the other application"

    serve.run(other.bind(), name="other", route_prefix="/other", blocking=False)
    _wait_for("the other application", lambda: (app := _serve_status().get("other")) and app.status == "RUNNING")
    return "other"


def test_ctrl_c_removes_only_its_own_app_and_keeps_serve_for_an_app_deployed_after_it(shared, other_app):
    srv = shared.autoscaled  # it started Serve on the cluster; the other application came after
    assert httpx.get(f"{srv.url}/other", timeout=30).text == "the other application"
    srv.proc.send_signal(signal.SIGINT)
    assert srv.proc.wait(timeout=120) == 0, "\n".join(srv.log_lines()[-20:])
    apps = _serve_status()
    assert "omnivoice" not in apps and apps["other"].status == "RUNNING"
    assert httpx.get(f"{srv.url}/other", timeout=30).text == "the other application"


def test_joining_serve_with_other_apps_goes_beside_them_and_a_killed_run_is_replaced_with_one_line(shared,
                                                                                                  other_app):
    taken = run_script("serve.py", "--model_dir", shared.build, "--ray", "--address", shared.address,
                       "--route-prefix", "/other", "--voices_dir", shared.folder / "voices", env=NO_AUTH)
    assert taken.returncode == 2 and "the route /other is taken by the application 'other'" in \
        last_error_line(taken), taken.stderr

    first = shared.serve_py("beside", "--route-prefix", "/omnivoice")
    assert first.ready_line.startswith(f"ready: {first.url}/omnivoice ") and not first.early_lines
    base = f"{first.url}/omnivoice/v1"
    client = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120)
    spoken = client.audio.speech.create(model="omnivoice", input=TWO_SENTENCES, voice="alloy", response_format="pcm",
                                        extra_body=FAST)
    assert len(pcm_samples(spoken.content)) > 24000
    assert httpx.get(f"{first.url}/other", timeout=30).text == "the other application"

    second = run_script("serve.py", "--model_dir", shared.build, "--ray", "--address", shared.address,
                        "--route-prefix", "/omnivoice", "--voices_dir", shared.folder / "voices", env=NO_AUTH)
    assert second.returncode == 2 and "already serves 'omnivoice'" in last_error_line(second), second.stderr

    first.proc.kill()  # SIGKILL: no chance to remove its application, which goes on serving with no owner
    first.proc.wait(timeout=30)
    assert _serve_status()["omnivoice"].status == "RUNNING"
    again = shared.serve_py("again", "--route-prefix", "/omnivoice")
    assert len(again.early_lines) == 1 and again.early_lines[0].startswith(
        "replacing the 'omnivoice' application left on this Ray cluster by a serve.py --ray that ended without "
        f"stopping it (pid {first.proc.pid} on "), again.early_lines
    spoken = openai.OpenAI(base_url=base, api_key="unused", max_retries=0, timeout=120).audio.speech.create(
        model="omnivoice", input=TWO_SENTENCES, voice="alloy", response_format="pcm", extra_body=FAST)
    assert len(pcm_samples(spoken.content)) > 24000

    again.proc.send_signal(signal.SIGINT)
    assert again.proc.wait(timeout=120) == 0, "\n".join(again.log_lines()[-20:])
    apps = _serve_status()  # Serve stays: it was not this command's, and the other application runs on it
    assert "omnivoice" not in apps and apps["other"].status == "RUNNING"


def test_a_run_that_started_serve_shuts_it_down_when_no_other_app_is_left(shared, other_app):
    import ray
    from ray import serve
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    serve.delete(other_app)
    serve.shutdown()  # a cluster without Serve: the next serve.py starts it
    shared.serve_port = None
    srv = shared.serve_py("alone")
    assert ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    srv.proc.send_signal(signal.SIGINT)
    assert srv.proc.wait(timeout=120) == 0, "\n".join(srv.log_lines()[-20:])
    _wait_for("Serve's controller to stop", _serve_gone, timeout=60)


def _serve_gone() -> bool:
    import ray
    from ray.serve._private.constants import SERVE_CONTROLLER_NAME, SERVE_NAMESPACE

    try:
        ray.get_actor(SERVE_CONTROLLER_NAME, namespace=SERVE_NAMESPACE)
    except ValueError:
        return True
    return False


def test_a_signal_once_health_answers_but_before_ready_ends_the_run(shared, tmp_path):
    """The ready wait's window: one replica answers /health through the proxy while the other cannot start (each
    asks for both of the head's two CPUs), so the run waits for it, without end; Ctrl-C there ends the run, its
    application and the Serve it started, within --drain-seconds."""
    from helpers.serving import free_port, signal_at_stage

    port = free_port()  # Serve is not running (the test before stopped it): this run starts it here

    def one_replica_answers() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
        except httpx.HTTPError:
            return False

    status, seconds, log = signal_at_stage(
        ["--model_dir", shared.build, "--ray", "--address", shared.address, "--replicas", "2", "--threads", "2",
         "--port", port, "--voices_dir", shared.folder / "voices", "--drain-seconds", "5"], tmp_path / "window.log",
        one_replica_answers, signal.SIGINT, env=NO_AUTH, wait=90)
    assert status == 130 and "ready: " not in log and "Traceback" not in log, log[-2000:]
    assert seconds < 60, seconds  # --drain-seconds for the replica that runs, then Ray's own teardown
    _wait_for("Serve's controller to stop", _serve_gone, timeout=60)


def _processes_naming(folder: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_text(errors="replace")
            except OSError:
                continue
            if folder in cmdline and (fields := _stat(int(entry))) is not None and fields[0] != "Z":
                found.append(int(entry))
    return found


@pytest.mark.parametrize("stage, sig", [
    ("starting: Ray at", signal.SIGINT),
    ("starting: deploying", signal.SIGTERM),
    ("starting: waiting for", signal.SIGINT),
])
def test_a_signal_at_any_stage_of_the_start_ends_the_run_and_its_ray(served_build, tmp_path, stage, sig):
    """Ctrl-C and SIGTERM end serve.py --ray whenever they come, with every Ray process it started gone."""
    import shutil
    import tempfile

    from helpers.serving import free_port, signal_at_stage

    ray_tmp = tempfile.mkdtemp(prefix="rs", dir="/tmp")  # short: Ray's socket paths live under it
    status, _, log = signal_at_stage(["--model_dir", served_build, "--ray", "--replicas", "1", "--threads", "1",
                                      "--port", free_port(), "--voices_dir", tmp_path / "voices", "--drain-seconds", "5"],
                                     tmp_path / "server.log", stage, sig, env={"RAY_TMPDIR": ray_tmp})
    # 130 when the start was cut short; 0 when the replica was quicker and the run was serving already
    assert status in (0, 130), log[-2000:]
    deadline = time.monotonic() + 30
    while _processes_naming(ray_tmp) and time.monotonic() < deadline:
        time.sleep(0.25)
    assert _processes_naming(ray_tmp) == []
    shutil.rmtree(ray_tmp, ignore_errors=True)  # made by this test
