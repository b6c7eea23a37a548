"""Where a decoding step's time goes: ONNX Runtime's profiler read by graph and op (step_profile, and the
raw events bench/roofline.py reads), and one step timed by batch size and way of running it (step_split)."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

from codes.checks.workloads import DETERMINISTIC, Case

# Time spent inside ONNX Runtime graphs; the rest of a step is the host's (numpy, copies, Python).
GRAPH_STAGES = ("embeddings", "backbone", "glue", "heads", "scoring")


def profiled_events(model_dir: Path, case: Case, threads: int, steps: int, provider: str | None = None,
                    backbone: Path | None = None) -> dict[str, list[dict]]:
    """Each graph's ONNX Runtime profiler events over `steps` + 1 deterministic decoding steps of `case`
    (the first for the callers to leave out: allocator growth)."""
    from codes.runtime.contract.settings import GenerationSettings
    from codes.runtime.synthesis import OmniVoiceOnnx

    with tempfile.TemporaryDirectory() as folder:
        tts = OmniVoiceOnnx(model_dir, provider=provider, threads=threads, profile_dir=Path(folder), backbone=backbone)
        requests = tts.settle(list(case.texts), duration=list(case.seconds))
        tts.generate_codes(requests, GenerationSettings(num_steps=steps + 1, **DETERMINISTIC))
        return {graph: json.loads(Path(session.end_profiling()).read_text())
                for graph, session in tts.sessions().items()}


def step_profile(model_dir: Path, case: Case, threads: int, provider: str | None = None, steps: int = 3,
                 backbone: Path | None = None) -> dict:
    """Where one decoding step of `case` goes, by graph and op type, from ONNX Runtime's profiler.

    Runs `steps` + 1 steps and leaves out each graph's first call (allocator growth).
    """
    seconds: dict[tuple[str, str], float] = {}
    for graph, events in profiled_events(model_dir, case, threads, steps, provider, backbone).items():
        first_end = min(e["ts"] + e["dur"] for e in events if e.get("name") == "model_run")
        for e in events:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time") and e["ts"] > first_end:
                key = (graph, e["args"]["op_name"])
                seconds[key] = seconds.get(key, 0.0) + e["dur"] / 1e6
    per_step = sorted(((g, op, t / steps) for (g, op), t in seconds.items()), key=lambda row: -row[2])
    return {"case": case.name, "steps": steps,
            "ops": [{"graph": g, "op": op, "s_per_step": t} for g, op, t in per_step]}


def step_split(model_dir: Path, case: Case, batch: int, step: str, threads: int, provider: str | None = None,
               backbone: Path | None = None, steps: int = 2) -> dict:
    """Seconds per decoding step, and the host's share of it, for `batch` copies of `case`'s first
    utterance decoded together, the step run as `step` (OmniVoiceOnnx's device, graph or numpy).
    The first step (prompt embedding, allocator growth) is left out."""
    from codes.runtime.contract.settings import GenerationSettings
    from codes.runtime.synthesis import OmniVoiceOnnx

    tts = OmniVoiceOnnx(model_dir, provider=provider, threads=threads, backbone=backbone, step=step)
    requests = tts.settle([case.texts[0]] * batch, duration=[case.seconds[0]] * batch)
    marks = {}

    def on_step(step: int, total: int) -> None:
        if step in (1, total):
            marks[step] = (time.perf_counter(), dict(tts.timings))

    tts.generate_codes(requests, GenerationSettings(num_steps=steps + 1), on_step=on_step)
    (start, before), (end, after) = marks[1], marks[steps + 1]
    step_s = (end - start) / steps
    graphs_s = {k: (after.get(k, 0.0) - before.get(k, 0.0)) / steps for k in GRAPH_STAGES if k in after}
    return {"batch": batch, "step": tts.step, "step_s": step_s,
            "host_share": max(0.0, 1 - sum(graphs_s.values()) / step_s), "graphs_s": graphs_s}


def median_split(runs: tuple[dict, ...]) -> dict:
    """One step_split row from several runs of the same batch and step: medians throughout."""
    first = runs[0]
    return {"batch": first["batch"], "step": first["step"],
            "step_s": statistics.median(r["step_s"] for r in runs),
            "host_share": statistics.median(r["host_share"] for r in runs),
            "graphs_s": {k: statistics.median(r["graphs_s"].get(k, 0.0) for r in runs) for k in first["graphs_s"]}}
