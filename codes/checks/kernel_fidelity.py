"""bench/kernel_fidelity.py: each build's fidelity against upstream fp32 on our CPU kernels and on ONNX Runtime's
own ops, side by side in one run (eval.py --mode fidelity's measure, once a build and kernel set)."""

from __future__ import annotations

from pathlib import Path

from codes.checks.results_page import environment
from codes.common.errors import UserError
from codes.common.isa import native_kernel_lanes
from codes.export.fidelity import run_fidelity
from codes.runtime.contract.native_kernels import EIGHT_LANES, KEEP, SWITCH, kernels_label, why_not
from codes.runtime.contract.manifest import read_manifest


def kernel_runs() -> list[tuple[str, dict]]:
    """Our kernels at each width this CPU runs them at (ours, then ours-avx2: ONNX Runtime's attention, as on an
    AVX2-only CPU), then ONNX Runtime's own ops: each a label and the environment it runs in."""
    runs = [(kernels_label(16), {SWITCH: None})] if native_kernel_lanes() == 16 else []
    return runs + [(kernels_label(8), {SWITCH: EIGHT_LANES}), ("ONNX Runtime's", {SWITCH: KEEP})]


def measure(builds: list[Path], steps: int, threads: int | None, log=print) -> dict:
    rows = []
    for build in builds:
        if not (Path(build) / "omnivoice_manifest.json").is_file():
            raise UserError(f"{build} has no omnivoice_manifest.json; pass a folder optimize.py built")
        precision = read_manifest(build).graph_precision.get("llm")
        for kernel, env in kernel_runs():
            with environment(env):
                if env[SWITCH] != KEEP and why_not(precision) is not None:
                    raise UserError(f"{build}: our kernels do not run here ({why_not(precision)})")
                summary = run_fidelity(Path(build), num_steps=steps, threads=threads).summary()
            rows.append({"build": str(build), "kernels": kernel, **summary})
            log(f"{Path(build).name}, {kernel} kernels: first step {100 * summary['first_step_agreement']:.1f}%")
    return {"steps": steps, "rows": rows}


def page(data: dict, machine_line: str, command: str) -> list[str]:
    lines = ["# Fidelity on our CPU kernels and on ONNX Runtime's own ops", "",
             f"Machine: {machine_line}. Made by `{command}`.", "",
             "Each build against upstream fp32 on its own checkpoint, teacher-forced (`eval.py --mode fidelity`: "
             f"6 prompts, {data['steps']} steps), on our kernels at each width this CPU runs them at (`ours`: attention, "
             f"row quantizers; `ours-avx2`: the row quantizers' 8-lane loops beside ONNX Runtime's attention, as an "
             f"AVX2-only CPU runs them, `{SWITCH}={EIGHT_LANES}`) and on ONNX Runtime's own ops (`{SWITCH}={KEEP}`), "
             "in one run.", "",
             "| build | kernels | first-step agreement | agreement, all steps | logit cosine | KL (nats/cell) |",
             "|---|---|---|---|---|---|"]
    lines += [f"| `{Path(r['build']).name}` | {r['kernels']} | {100 * r['first_step_agreement']:.1f}% | "
              f"{100 * r['agreement']:.1f}% | {r['cosine']:.5f} | {r['kl']:.4f} |" for r in data["rows"]]
    return lines
