"""int8 schemes side by side (bench/quant_bench.py): each built from the same checkpoints, with its fidelity
against upstream fp32, its decoding step's time and its peak memory, on this machine.

Every scheme is a real build: the cpu_int8 profile with another int8 scheme and heads precision.
Fidelity is the build's own report (optimize.py measures it on every quantized build); the
step is timed over the 10 s utterance, the schemes taking turns each round, fastest round kept.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path

from codes.export.int8 import Int8Scheme
from codes.export.profiles import INT8, PROFILES, Profile


@dataclass(frozen=True)
class Scheme:
    key: str  # --schemes picks by it
    name: str
    int8: Int8Scheme | None  # None: the fp32 build, the speed reference
    heads: str = "int8"

    def profile(self) -> Profile:
        if self.int8 is None:
            return PROFILES["cpu_fp32"]
        base = PROFILES["cpu_int8"]
        return dataclasses.replace(base, int8=self.int8, precision={**base.precision, "heads": self.heads})


# What cpu_int8 was: ORT's quantize_dynamic (full 8-bit weights, one scale each, DynamicQuantizeLinear).
PER_TENSOR = Int8Scheme(weights="tensor", activations="tensor", outlier_ratio=None, weight_levels=127)
SCHEMES = {scheme.key: scheme for scheme in (
    Scheme("fp32", "fp32", None, "fp32"),
    Scheme("per-tensor", "int8 per tensor (cpu_int8 until now)", PER_TENSOR),
    Scheme("per-column", "+ a weight scale per column",
           dataclasses.replace(INT8, activations="tensor", outlier_ratio=None)),
    Scheme("smoothquant", "+ SmoothQuant (alpha 0.5)",
           dataclasses.replace(INT8, activations="tensor", outlier_ratio=None, smooth_alpha=0.5)),
    Scheme("per-token", "per-column weights, per-token activations", dataclasses.replace(INT8, outlier_ratio=None)),
    Scheme("outliers", "+ outlier channels in fp32", INT8),
    Scheme("cpu_int8", "+ fp32 heads, full 8-bit weights (cpu_int8 now)", INT8, "fp32"),
    Scheme("cpu_int8-7bit", "+ fp32 heads, 7-bit weights (cpu_int8 at 92ef807)",
           dataclasses.replace(INT8, weight_levels=63), "fp32"),
    Scheme("cpu_int8-tensor", "+ fp32 heads, per-tensor activations once the outliers are split (DynamicQuantizeMatMul)",
           dataclasses.replace(INT8, activations="tensor"), "fp32"),
    Scheme("cpu_int8-smoothquant", "+ fp32 heads, SmoothQuant (alpha 0.5)", dataclasses.replace(INT8, smooth_alpha=0.5),
           "fp32"),
    Scheme("w8a32", "weight-only int8, per column (W8A32)", Int8Scheme(activations="none", outlier_ratio=None)),
    Scheme("w8a32-fp32-heads", "weight-only int8, fp32 heads (the backbone's weights alone)",
           Int8Scheme(activations="none", outlier_ratio=None), "fp32"),
)}
# The page's ratios: agreement against weight-only int8's, step time against the old cpu_int8's.
WEIGHT_ONLY, BEFORE, CHOSEN = "w8a32", "per-tensor", "cpu_int8"
assert PROFILES["cpu_int8"] == SCHEMES[CHOSEN].profile(), "the chosen row must be the cpu_int8 profile as it ships"


def build_scheme(scheme: Scheme, checkpoint: str, out: Path, log=print) -> Path:
    """The scheme's build of `checkpoint` (a folder or a generated name) into `out`, once."""
    from codes.export.build import BuildRequest, build, resolve_inputs

    if (out / "omnivoice_manifest.json").is_file():
        return out
    request = BuildRequest(checkpoint=None, profile=scheme.profile(), output=out, include_higgs=True, log=log)
    resolve_inputs(request, checkpoint)
    build(request)
    return out


def timed_runs(folders: dict[str, Path], threads: int, rounds: int, steps: int) -> dict[str, dict]:
    """Seconds a decoding step of the 10 s utterance takes in each build, and its whole synthesis (codec
    included): the builds take turns each round, the fastest round kept."""
    from codes.checks.rtf_engines import OnnxEngine
    from codes.checks.workloads import WORKLOADS

    case = WORKLOADS["10s"][0].with_steps(steps)
    engines = {name: OnnxEngine(folder, threads) for name, folder in folders.items()}
    best = {name: {"step_seconds": float("inf"), "synthesis_seconds": float("inf")} for name in engines}
    for _ in range(rounds):
        for name, engine in engines.items():
            total = engine.run(case)["total"]
            step = sum(seconds for stage, seconds in engine.tts.timings.items() if stage not in ("prompt", "noise", "codec"))
            best[name]["step_seconds"] = min(best[name]["step_seconds"], step / steps)
            best[name]["synthesis_seconds"] = min(best[name]["synthesis_seconds"], total)
    return best


def measure(checkpoints: list[str], keys: list[str], work: Path, threads: int, rounds: int, steps: int,
            log=print) -> dict:
    """Each scheme of `keys` built from each checkpoint into `work` (kept: a rerun only measures), then timed and
    its memory taken."""
    from codes.checks.peak_memory import peak_memory_mb
    from codes.common.errors import UserError
    from codes.runtime.contract.manifest import read_manifest

    unknown = sorted(set(keys) - set(SCHEMES))
    if unknown:
        raise UserError(f"--schemes {' '.join(unknown)}: unknown; choose from {', '.join(SCHEMES)}")
    rows = []
    for checkpoint in checkpoints:
        folders = {}
        for key in keys:
            log(f"[{checkpoint}] building {SCHEMES[key].name}")
            folders[key] = build_scheme(SCHEMES[key], checkpoint, work / f"{Path(checkpoint).name}-{key}", log=log)
        log(f"[{checkpoint}] timing the step ({rounds} rounds of {steps} steps)")
        start = time.perf_counter()
        times = timed_runs(folders, threads, rounds, steps)
        log(f"[{checkpoint}] timed in {time.perf_counter() - start:.0f} s; measuring peak memory")
        for key in keys:
            scheme, folder = SCHEMES[key], folders[key]
            fidelity = read_manifest(folder).data.get("fidelity") or {}
            rows.append({
                "checkpoint": checkpoint, "key": key, "scheme": scheme.name,
                "int8": scheme.int8.facts() if scheme.int8 else None,
                "heads": scheme.heads, "fidelity": {k: v for k, v in fidelity.items() if k != "steps"},
                **times[key],
                "peak_mb": peak_memory_mb(folder, threads, "10s"),
            })
    return {"rows": rows, "threads": threads, "rounds": rounds, "steps": steps}


def page(data: dict, machine: dict) -> list[str]:
    from codes.checks.results_page import machine_line

    lines = ["# int8 schemes: fidelity, speed and memory", "",
             f"Machine: {machine_line(machine)}; {data['threads']} threads. Made by "
             f"`{data.get('command', 'python bench/quant_bench.py')}`.", "",
             "Trained OmniVoice weights cannot be downloaded here: every row is on the project's own random "
             f"checkpoints ({', '.join(dict.fromkeys(row['checkpoint'] for row in data['rows']))}; the `-outlier` "
             "ones with the outlier channels and massive activations trained transformers have, the `-tied` ones "
             "with the nearly tied head logits a trained model has, codes/export/generated.py). Fidelity is the build's own report against upstream "
             "fp32 (teacher-forced, 6 prompts in 6 languages with design and clone, 8 steps); *vs W8A32* is its "
             "first-step agreement over weight-only int8's. The step and the synthesis (codec included) are the 10 s "
             f"utterance's, fastest of {data['rounds']} rounds of {data['steps']} steps with the schemes taking turns; "
             "*vs before* is against the per-tensor int8 that cpu_int8 was until now. The `wide` checkpoints have "
             "4 of the real 28 layers at full width: the heads and each layer's quantization are a larger share of "
             "their step than of a full one, so their speed ratios overstate a scheme's cost (full size: "
             "bench/quant_results_full.md).", ""]
    by_checkpoint: dict[str, list] = {}
    for row in data["rows"]:
        by_checkpoint.setdefault(row["checkpoint"], []).append(row)
    for checkpoint, rows in by_checkpoint.items():
        named = {row["key"]: row for row in rows}
        weight_only = named[WEIGHT_ONLY]["fidelity"].get("first_step_agreement") if WEIGHT_ONLY in named else None
        before = named[BEFORE] if BEFORE in named else None
        lines += [f"## {checkpoint}", "",
                  "| scheme | heads | first-step agreement | vs W8A32 | agreement, 8 steps | logit cosine | KL (nats/cell) "
                  "| step (s) | synthesis (s) | synthesis vs before | peak memory (MB) |",
                  "|---|---|---|---|---|---|---|---|---|---|---|"]
        for row in rows:
            f = row["fidelity"]
            first = f.get("first_step_agreement")
            cells = ([f"{100 * first:.1f}%", f"{first / weight_only:.2f}x" if weight_only else "-",
                      f"{100 * f['agreement']:.1f}%", f"{f['cosine']:.5f}", f"{f['kl']:.4f}"] if first is not None
                     else ["(reference)"] + ["-"] * 4)
            mark = "**" if row["key"] == CHOSEN else ""
            speed = f"{row['synthesis_seconds'] / before['synthesis_seconds']:.2f}x" if before else "-"
            lines.append(f"| {mark}{row['scheme']}{mark} | {row['heads']} | " + " | ".join(cells)
                         + f" | {row['step_seconds']:.4f} | {row['synthesis_seconds']:.2f} | {speed} | {row['peak_mb']:.0f} |")
        lines.append("")
    return lines
