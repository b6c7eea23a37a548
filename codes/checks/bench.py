"""eval.py --mode rtf: a fixed, named workload timed on our builds and on upstream PyTorch, side by side.

Runs are interleaved (every engine once per round) so drift hits all engines alike.
Peak memory is measured per engine in a fresh subprocess, alone.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from codes.common.fileio import atomic_path, write_json_atomic
from codes.runtime.specs import FRAME_RATE

TEXT_10S = ("The old lighthouse keeper climbed the spiral stairs every evening, counting each of the one hundred "
            "and twelve steps, and lit the lamp that guided the fishing boats safely home through the fog.")
TEXT_3S = "Please leave the package by the front door."
TEXTS_BATCH = [
    "Good morning, and welcome to the station.",
    "The next train to the airport leaves from platform four.",
    "Tickets can be bought from the machines near the entrance.",
    "Thank you for travelling with us today.",
]


@dataclass(frozen=True)
class Case:
    name: str
    texts: tuple[str, ...]
    seconds: tuple[float, ...]  # forced target lengths, identical for every engine
    num_steps: int = 32

    @property
    def audio_seconds(self) -> float:
        return float(sum(self.seconds))

    @property
    def frames(self) -> int:
        return sum(int(s * FRAME_RATE) for s in self.seconds)


WORKLOADS = {
    "default": (
        Case("10 s utterance", (TEXT_10S,), (10.0,)),
        Case("3 s utterance", (TEXT_3S,), (3.0,)),
        Case("batch of 4 x 3 s", tuple(TEXTS_BATCH), (3.0,) * 4),
    ),
    # The headline case alone, for full-size runs where every engine takes minutes per utterance.
    "10s": (Case("10 s utterance", (TEXT_10S,), (10.0,)),),
    # CI's smoke test: every code path, seconds of work.
    "smoke": (
        Case("1 s utterance", (TEXT_3S,), (1.0,), num_steps=4),
        Case("batch of 2 x 1 s", tuple(TEXTS_BATCH[:2]), (1.0, 1.0), num_steps=4),
    ),
}

DETERMINISTIC = dict(position_temperature=0.0, class_temperature=0.0)
# Stages outside the decoding loop: s/step is the rest divided by the steps.
NOT_STEPS = {"prompt", "codec", "post-processing", "codec + post-processing"}


class OnnxEngine:
    def __init__(self, model_dir: Path, threads: int, provider: str | None = None, higgs_dir: Path | None = None,
                 backbone: Path | None = None):
        from codes.runtime.synthesis import OmniVoiceOnnx

        self.model_dir, self.higgs_dir, self.backbone = Path(model_dir), higgs_dir, backbone
        self.tts = OmniVoiceOnnx(model_dir, higgs_dir=higgs_dir, provider=provider, threads=threads, backbone=backbone)
        data = self.tts.manifest.data
        self.kind, self.profile = "onnx", data.get("profile")
        # One word when the three backbone graphs agree ("fp32"), else embeddings/llm/heads as equiv prints it.
        graphs = [self.tts.manifest.graph_precision[k] for k in ("embeddings", "llm", "heads")]
        self.precision = graphs[0] if len(set(graphs)) == 1 else "/".join(graphs)
        self.name = f"ours {self.profile} ({self.model_dir.name})"  # display only

    def run(self, case: Case, seed: int = 0) -> dict:
        self.tts.timings.clear()
        start = time.perf_counter()
        _, codes = self.tts.generate(list(case.texts), duration=list(case.seconds), num_steps=case.num_steps,
                                     seed=seed, return_codes=True, **DETERMINISTIC)
        total = time.perf_counter() - start
        stages = dict(self.tts.timings)
        return {"total": total, "stages": stages, "codes": codes}


class TorchEngine:
    def __init__(self, checkpoint: Path, dtype: str, threads: int):
        import torch
        from omnivoice.models.omnivoice import OmniVoice

        torch.set_num_threads(threads)
        self.dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        self.model = OmniVoice.from_pretrained(str(checkpoint), attn_implementation="sdpa", dtype=self.dtype).eval()
        self.model.audio_tokenizer.float()  # upstream keeps its codec in fp32
        self.kind, self.precision, self.profile = "torch", dtype, None
        self.name = f"upstream torch {dtype}"  # display only

    def run(self, case: Case, seed: int = 0) -> dict:
        """upstream `generate` for short texts, stage by stage: the same calls in the same order."""
        import torch
        from omnivoice.models.omnivoice import OmniVoiceGenerationConfig

        torch.manual_seed(seed)
        config = OmniVoiceGenerationConfig(num_step=case.num_steps, **DETERMINISTIC)
        clock = time.perf_counter()
        with torch.inference_mode():
            task = self.model._preprocess_all(text=list(case.texts), duration=list(case.seconds))
            prompt_done = time.perf_counter()
            tokens = self.model._generate_iterative(task, config)
            steps_done = time.perf_counter()
            for item, item_tokens in enumerate(tokens):
                self.model._decode_and_post_process(item_tokens, task.ref_rms[item], config)
        end = time.perf_counter()
        stages = {"prompt": prompt_done - clock, "decoding steps": steps_done - prompt_done,
                  "codec + post-processing": end - steps_done}
        return {"total": end - clock, "stages": stages, "codes": [t.numpy() for t in tokens]}


def describe(engine) -> dict:
    """The fields that identify an engine; its name is for display."""
    return {"kind": engine.kind, "precision": engine.precision, "profile": engine.profile}


def reference_engine(engines: dict[str, dict]) -> str | None:
    """Agreement is measured against upstream fp32 when it ran, else against our fp32 build."""
    for kind in ("torch", "onnx"):
        for name, fields in engines.items():
            if fields["kind"] == kind and fields["precision"] == "fp32":
                return name
    return None


def torch_baselines(engines: dict[str, dict]) -> dict[str, str]:
    """Upstream engines the step time is compared with: dtype -> engine name, fp32 first."""
    found = {fields["precision"]: name for name, fields in engines.items() if fields["kind"] == "torch"}
    return {dtype: found[dtype] for dtype in ("fp32", "bf16") if dtype in found}


def make_engines(model_dirs, torch_checkpoint, torch_dtypes, threads: int, provider: str | None = None, higgs_dir=None,
                 backbone=None):
    # --backbone replaces the first build's backbone only: the others are timed as built.
    engines = [OnnxEngine(d, threads, provider, higgs_dir, backbone if i == 0 else None) for i, d in enumerate(model_dirs)]
    if torch_checkpoint:
        engines += [TorchEngine(torch_checkpoint, dtype, threads) for dtype in torch_dtypes]
    return engines


def _summary(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "runs": len(values)}


def workload_cases(workload: str, num_steps: int | None = None) -> tuple[Case, ...]:
    """The named cases; num_steps overrides their step count (each step is one identical forward)."""
    cases = WORKLOADS[workload]
    if num_steps is None:
        return cases
    return tuple(Case(c.name, c.texts, c.seconds, num_steps=num_steps) for c in cases)


def run_benchmark(engines, cases: tuple[Case, ...], repeats: int, warmup: int, log=print) -> dict:
    results = {engine.name: {} for engine in engines}
    for case in cases:
        # Warm-up: the same shapes for two steps (session prepacking, allocator growth, caches).
        warm_case = Case(case.name, case.texts, case.seconds, num_steps=min(2, case.num_steps))
        for engine in engines:
            for _ in range(warmup):
                engine.run(warm_case)
        runs = {engine.name: [] for engine in engines}
        for round_index in range(repeats):
            for engine in engines:  # interleaved: drift hits every engine
                runs[engine.name].append(engine.run(case))
                log(f"  {case.name}: {engine.name} round {round_index + 1}: {runs[engine.name][-1]['total']:.2f} s")
        for engine in engines:
            totals = [r["total"] for r in runs[engine.name]]
            loop = [r["total"] - sum(v for k, v in r["stages"].items() if k in NOT_STEPS) for r in runs[engine.name]]
            entry = {"total_s": _summary(totals), "rtf": statistics.median(totals) / case.audio_seconds,
                     "step_s": statistics.median(loop) / case.num_steps, "num_steps": case.num_steps,
                     "frames": case.frames}
            stage_names = runs[engine.name][0]["stages"]
            entry["stages_s"] = {k: statistics.median(r["stages"].get(k, 0.0) for r in runs[engine.name])
                                 for k in stage_names}
            if engine.kind == "onnx":
                entry["stages_s"]["decoding maths + rest"] = max(
                    0.0, statistics.median(totals) - sum(entry["stages_s"].values()))
            entry["codes"] = runs[engine.name][0]["codes"]
            results[engine.name][case.name] = entry
    return results


def token_agreement(results: dict, reference_name: str) -> dict:
    """Share of equal codes with the reference engine, same seed and deterministic settings."""
    agreement = {}
    for name, cases in results.items():
        if name == reference_name:
            continue
        per_case = {}
        for case_name, entry in cases.items():
            ref = results[reference_name][case_name]["codes"]
            if entry["codes"] is None or ref is None:
                continue
            per_case[case_name] = float(np.mean([np.mean(a == b) for a, b in zip(entry["codes"], ref)]))
        if per_case:
            agreement[name] = per_case
    return agreement


def peak_memory_mb(model_dir: Path, threads: int, workload: str, higgs_dir: Path | None = None,
                   backbone: Path | None = None) -> float:
    """Peak resident memory of one synthesis in a fresh process (the build's real footprint).

    Two decoding steps suffice: every step has the same shapes, so the peak is reached in the first.
    """
    # VmHWM, not ru_maxrss: Linux carries ru_maxrss across exec, so a child would report its parent's peak.
    code = (
        "import re, sys; sys.path.insert(0, sys.argv[1]);"
        "from codes.checks.bench import OnnxEngine, WORKLOADS;"
        "from codes.checks.bench import Case;"
        "engine = OnnxEngine(sys.argv[2], int(sys.argv[3]), higgs_dir=sys.argv[5] or None, backbone=sys.argv[6] or None);"
        "case = WORKLOADS[sys.argv[4]][0];"
        "engine.run(Case(case.name, case.texts, case.seconds, num_steps=2));"
        "print(re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read()).group(1))"
    )
    root = Path(__file__).resolve().parents[2]  # the repository root, which holds codes/
    out = subprocess.run([sys.executable, "-c", code, str(root), str(model_dir), str(threads), workload,
                          str(higgs_dir or ""), str(backbone or "")],
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def profiled_events(model_dir: Path, case: Case, threads: int, steps: int, provider: str | None = None,
                    backbone: Path | None = None) -> dict[str, list[dict]]:
    """Each graph's ONNX Runtime profiler events over `steps` + 1 deterministic decoding steps of `case`
    (the first for the callers to leave out: allocator growth)."""
    import tempfile

    from codes.runtime.settings import GenerationSettings
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


# The instruction sets ONNX Runtime's GEMMs choose among: a speed figure means little without them.
ISA_FLAGS = {"avx2": "AVX2", "avx512f": "AVX-512", "avx_vnni": "AVX-VNNI", "avx512_vnni": "AVX-512 VNNI",
             "avx512_bf16": "AVX-512 BF16", "amx_int8": "AMX-INT8", "amx_bf16": "AMX-BF16"}


def cpu_info() -> tuple[str, list[str], list[str]]:
    """The CPU's model name, its instruction sets that matter here (ISA_FLAGS) and all its flags."""
    model, flags = platform.processor(), []
    try:
        pairs = (line.split(":", 1) for line in Path("/proc/cpuinfo").read_text().splitlines() if ":" in line)
        fields = {key.strip(): value.strip() for key, value in pairs}  # every core says the same
        model, flags = fields.get("model name", model), fields.get("flags", "").split()
    except OSError:
        pass
    return model, [name for flag, name in ISA_FLAGS.items() if flag in flags], flags


def machine() -> dict:
    import onnxruntime

    model, isa, _ = cpu_info()
    return {"cpu": model, "isa": isa, "logical_cpus": os.cpu_count(), "python": platform.python_version(),
            "onnxruntime": onnxruntime.__version__}


def machine_line(info: dict) -> str:
    """How a results page names its machine: the CPU, its cores and instruction sets, onnxruntime."""
    return (f"{info['cpu']}, {info['logical_cpus']} cores ({', '.join(info['isa']) or 'no AVX2'}); onnxruntime "
            f"{info['onnxruntime']}")


def write_page(out: Path | None, lines: list[str], data: dict | None = None) -> None:
    """A bench script's markdown page, printed, and with `out` written there (and `data` beside it as .json)."""
    text = "\n".join(lines) + "\n"
    print(text)
    if out is not None:
        with atomic_path(out) as tmp:
            tmp.write_text(text, encoding="utf-8")
        if data is not None:
            with atomic_path(out.with_suffix(".json")) as tmp:
                tmp.write_text(json.dumps(data, indent=1, default=str) + "\n", encoding="utf-8")


def markdown(report: dict) -> str:
    lines = [f"# Benchmark: {report['workload']} workload", "",
             f"Command: `{report['command']}`", "",
             f"Machine: {report['machine']['cpu']} ({', '.join(report['machine'].get('isa', [])) or 'no AVX2'}), "
             f"{report['threads']} threads; onnxruntime "
             f"{report['machine']['onnxruntime']}; {report['date']}. Median of {report['repeats']} interleaved runs "
             f"after {report['warmup']} two-step warm-up run(s); deterministic settings (no sampling noise). "
             "s/step is the decoding loop alone (total minus prompt, codec and post-processing); each step is "
             "one identical full-sequence forward, so it does not depend on the step count.", ""]
    engines = list(report["results"])
    cases = list(next(iter(report["results"].values())))
    baseline = torch_baselines(report.get("engines", {}))
    for case in cases:
        columns = ["engine", "steps", "total s (min–max)", "s/step", "RTF"] + [f"step × vs torch {d}" for d in baseline]
        lines += [f"## {case}", "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
        for name in engines:
            e = report["results"][name][case]
            t = e["total_s"]
            cells = [name, str(e["num_steps"]), f"{t['median']:.2f} ({t['min']:.2f}–{t['max']:.2f})",
                     f"{e['step_s']:.3f}", f"{e['rtf']:.2f}"]
            cells += [f"{report['results'][b][case]['step_s'] / e['step_s']:.2f}" for b in baseline.values()]
            lines.append("| " + " | ".join(cells) + " |")
        stage_rows = [(n, report["results"][n][case]["stages_s"]) for n in engines if "stages_s" in report["results"][n][case]]
        if stage_rows:
            stage_names = list(dict.fromkeys(k for _, stages in stage_rows for k in stages))
            lines += ["", "Stages (s, median): ", "", "| engine | " + " | ".join(stage_names) + " |",
                      "|---|" + "---|" * len(stage_names)]
            for name, stages in stage_rows:
                lines.append(f"| {name} | " + " | ".join(f"{stages[s]:.3f}" if s in stages else "-" for s in stage_names) + " |")
        lines.append("")
    if report.get("memory_mb"):
        lines += ["## Peak resident memory (one synthesis, fresh process)", "", "| engine | MB |", "|---|---|"]
        lines += [f"| {k} | {v:.0f} |" for k, v in report["memory_mb"].items()] + [""]
    if report.get("step_profile"):
        prof = report["step_profile"]
        total = sum(row["s_per_step"] for row in prof["ops"])
        lines += [f"## Where a decoding step goes: {prof['model']}, {prof['case']}", "",
                  f"ONNX Runtime's profiler, kernel time per step (mean of {prof['steps']} steps): "
                  f"{total:.3f} s in all.", "", "| graph | op | s/step | share |", "|---|---|---|---|"]
        shown = [row for row in prof["ops"] if row["s_per_step"] >= 0.005 * total]
        lines += [f"| {r['graph']} | {r['op']} | {r['s_per_step']:.3f} | {100 * r['s_per_step'] / total:.1f}% |"
                  for r in shown]
        rest = total - sum(r["s_per_step"] for r in shown)
        lines += [f"| (other ops) | | {rest:.3f} | {100 * rest / total:.1f}% |", ""]
    if report.get("step_split"):
        split = report["step_split"]
        lines += [f"## One decoding step by batch size: {split['model']}, {split['case']}", "",
                  f"Median of {split.get('runs', 1)} interleaved run(s) of each row.", "",
                  "Step `numpy`: the graphs joined on the host and cells scored in numpy (the reference); `graph`: "
                  "the graphs joined on the host, cells scored by the cell-scoring graph; `device`: the graphs joined "
                  "by the glue graphs on the execution provider, only tokens and scores back. The host's share is "
                  "the step's time outside ONNX Runtime graphs.", "",
                  "| batch | step | s/step | host share | embeddings s | backbone s | glue s | heads s | scoring s |",
                  "|---|---|---|---|---|---|---|---|---|"]
        lines += [f"| {r['batch']} | {r['step']} | {r['step_s']:.3f} | {100 * r['host_share']:.0f}% | "
                  + " | ".join(f"{r['graphs_s'].get(stage, 0):.3f}" for stage in GRAPH_STAGES) + " |"
                  for r in split["rows"]] + [""]
    if report.get("agreement"):
        lines += [f"## Token agreement with {report['reference']}", "", "| engine | " + " | ".join(cases) + " |",
                  "|---|" + "---|" * len(cases)]
        for name, per_case in report["agreement"].items():
            lines.append(f"| {name} | " + " | ".join(f"{100 * per_case.get(c, float('nan')):.1f}%" for c in cases) + " |")
        lines.append("")
    return "\n".join(lines)


# Time spent inside ONNX Runtime graphs; the rest of a step is the host's (numpy, copies, Python).
GRAPH_STAGES = ("embeddings", "backbone", "glue", "heads", "scoring")


def step_split(model_dir: Path, case: Case, batch: int, step: str, threads: int, provider: str | None = None,
               backbone: Path | None = None, steps: int = 2) -> dict:
    """Seconds per decoding step, and the host's share of it, for `batch` copies of `case`'s first
    utterance decoded together, the step run as `step` (OmniVoiceOnnx's device, graph or numpy).
    The first step (prompt embedding, allocator growth) is left out."""
    from codes.runtime.settings import GenerationSettings
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


def _median_row(runs: tuple[dict, ...]) -> dict:
    """One step_split row from several runs of the same batch and step: medians throughout."""
    first = runs[0]
    return {"batch": first["batch"], "step": first["step"],
            "step_s": statistics.median(r["step_s"] for r in runs),
            "host_share": statistics.median(r["host_share"] for r in runs),
            "graphs_s": {k: statistics.median(r["graphs_s"].get(k, 0.0) for r in runs) for k in first["graphs_s"]}}


def write_report(report: dict, out: Path) -> tuple[Path, Path]:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for cases in report["results"].values():
        for entry in cases.values():
            entry.pop("codes", None)
    json_path, md_path = out.with_suffix(".json"), out.with_suffix(".md")
    write_json_atomic(json_path, {k: v for k, v in report.items() if k != "engines"})
    with atomic_path(md_path) as tmp:
        tmp.write_text(markdown(report), encoding="utf-8")
    return json_path, md_path


@dataclass
class BenchRequest:
    model_dirs: list[Path]
    torch_checkpoint: Path | None = None
    torch_dtypes: list[str] = field(default_factory=lambda: ["fp32"])
    higgs_dir: Path | None = None
    backbone: Path | None = None
    provider: str | None = None
    workload: str = "default"
    num_steps: int | None = None
    repeats: int = 3
    warmup: int = 1
    threads: int = 2
    memory: bool = True
    profile: bool = True  # the per-op profile of one step of the first build
    step_batches: list[int] = field(default_factory=list)  # s/step and host share at these batch sizes
    out: Path = Path("bench/results")
    command: str = ""


def benchmark(request: BenchRequest, log=print) -> dict:
    engines = make_engines(request.model_dirs, request.torch_checkpoint, request.torch_dtypes, request.threads,
                           provider=request.provider, higgs_dir=request.higgs_dir, backbone=request.backbone)
    results = run_benchmark(engines, workload_cases(request.workload, request.num_steps), request.repeats,
                            request.warmup, log)
    described = {e.name: describe(e) for e in engines}
    reference = reference_engine(described)
    report = {
        "workload": request.workload, "num_steps": request.num_steps or "as named", "command": request.command,
        "threads": request.threads, "provider": engines[0].tts.provider,
        "repeats": request.repeats, "warmup": request.warmup, "date": time.strftime("%Y-%m-%d"),
        "machine": machine(), "results": results,
        "reference": reference, "agreement": token_agreement(results, reference) if reference else {},
        "engines": described,  # what markdown() reads to pick baselines; not written to the JSON
    }
    if request.profile:
        main = next(e for e in engines if e.kind == "onnx")
        report["step_profile"] = {"model": main.name, **step_profile(
            main.model_dir, workload_cases(request.workload)[0], request.threads, request.provider,
            backbone=main.backbone)}
    if request.step_batches:
        from codes.runtime.synthesis import STEPS

        main = next(e for e in engines if e.kind == "onnx")
        case = workload_cases(request.workload)[0]
        # Interleaved rounds, as the engines': drift on a shared machine hits every way alike.
        rounds = [[step_split(main.model_dir, case, batch, step, request.threads, request.provider, main.backbone)
                   for batch in request.step_batches for step in STEPS] for _ in range(request.repeats)]
        report["step_split"] = {"model": main.name, "case": case.name, "runs": request.repeats,
                                "rows": [_median_row(runs) for runs in zip(*rounds)]}
        for row in report["step_split"]["rows"]:
            log(f"  step split: batch {row['batch']}, {row['step']}: {row['step_s']:.3f} s/step, "
                f"host {100 * row['host_share']:.0f}%")
    if request.memory:
        report["memory_mb"] = {e.name: peak_memory_mb(e.model_dir, request.threads, request.workload, e.higgs_dir,
                                                      e.backbone)
                               for e in engines if e.kind == "onnx"}
    write_report(report, request.out)
    return report
