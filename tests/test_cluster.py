"""serve.py --ray on a real local Ray: two replicas of the tiny build behind Ray Serve's proxy, the official
openai client, a replica killed by its process id, and Ctrl-C that leaves no Ray process behind.

One deployment for the module (Ray and two models take ~20 s to start on two cores); the tests run in
file order and the last one stops it.
"""

from __future__ import annotations

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

from conftest import last_error_line, run_script
from serving import FAST, TWO_SENTENCES, Server, pcm_samples

HEADER = "x-omnivoice-replica"
LONG = " ".join(f"Sentence {i} of a request that is still being spoken when its replica dies." for i in range(4))


@pytest.fixture(scope="module")
def cluster(served_build, tmp_path_factory):
    folder = tmp_path_factory.mktemp("cluster")
    srv = Server(served_build, folder / "voices", folder / "server.log", "--ray", "--replicas", "2", "--threads", "1")
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
