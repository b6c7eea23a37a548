"""eval.py --mode rtf: a fixed, named workload (codes/checks/workloads.py) timed on our builds and on upstream
PyTorch (codes/checks/rtf_engines.py), side by side, and its results page.

Runs are interleaved (every engine once per round) so drift hits all engines alike.
Peak memory is measured per engine in a fresh subprocess, alone (codes/checks/peak_memory.py), and where one
step goes from ONNX Runtime's profiler (codes/checks/profiling.py).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from codes.checks.peak_memory import peak_memory_mb
from codes.checks.profiling import GRAPH_STAGES, median_split, step_profile, step_split
from codes.checks.results_page import machine, machine_line
from codes.checks.rtf_engines import OnnxEngine, TorchEngine, describe
from codes.checks.workloads import Case, workload_cases
from codes.common.fileio import atomic_path, write_json_atomic

# Stages outside the decoding loop: s/step is the rest divided by the steps.
NOT_STEPS = {"prompt", "codec", "post-processing", "codec + post-processing"}


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


def run_benchmark(engines, cases: tuple[Case, ...], repeats: int, warmup: int, log=print) -> dict:
    results = {engine.name: {} for engine in engines}
    for case in cases:
        # Warm-up: the same shapes for two steps (session prepacking, allocator growth, caches).
        warm_case = case.with_steps(min(2, case.num_steps))
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


def markdown(report: dict) -> str:
    lines = [f"# Benchmark: {report['workload']} workload", "",
             f"Command: `{report['command']}`", "",
             f"Machine: {machine_line(report['machine'])}; {report['threads']} threads; {report['date']}. "
             f"Median of {report['repeats']} interleaved runs "
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
                                "rows": [median_split(runs) for runs in zip(*rounds)]}
        for row in report["step_split"]["rows"]:
            log(f"  step split: batch {row['batch']}, {row['step']}: {row['step_s']:.3f} s/step, "
                f"host {100 * row['host_share']:.0f}%")
    if request.memory:
        report["memory_mb"] = {e.name: peak_memory_mb(e.model_dir, request.threads, request.workload, e.higgs_dir,
                                                      e.backbone)
                               for e in engines if e.kind == "onnx"}
    write_report(report, request.out)
    return report
