"""bench/attention_fidelity.py: each build's fidelity against upstream fp32 with the fused attention kernel and with
ONNX Runtime's own, side by side in one run (eval.py --mode fidelity's measure, twice a build)."""

from __future__ import annotations

from pathlib import Path

from codes.checks.results_page import environment
from codes.common.errors import UserError
from codes.export.fidelity import run_fidelity
from codes.runtime.contract.fused_attention import KEEP, SWITCH, why_not
from codes.runtime.contract.manifest import read_manifest

KERNELS = (("fused kernel", {}), ("ONNX Runtime's", {SWITCH: KEEP}))


def measure(builds: list[Path], steps: int, threads: int | None, log=print) -> dict:
    rows = []
    for build in builds:
        if not (Path(build) / "omnivoice_manifest.json").is_file():
            raise UserError(f"{build} has no omnivoice_manifest.json; pass a folder optimize.py built")
        precision = read_manifest(build).graph_precision.get("llm")
        for kernel, env in KERNELS:
            with environment(env):
                if env == {} and why_not(precision) is not None:
                    raise UserError(f"{build}: the fused kernel does not run here ({why_not(precision)})")
                summary = run_fidelity(Path(build), num_steps=steps, threads=threads).summary()
            rows.append({"build": str(build), "attention": kernel, **summary})
            log(f"{Path(build).name}, {kernel} attention: first step {100 * summary['first_step_agreement']:.1f}%")
    return {"steps": steps, "rows": rows}


def page(data: dict, machine_line: str, command: str) -> list[str]:
    lines = ["# Fidelity with the fused attention kernel and with ONNX Runtime's", "",
             f"Machine: {machine_line}. Made by `{command}`.", "",
             "Each build against upstream fp32 on its own checkpoint, teacher-forced (`eval.py --mode fidelity`: "
             f"6 prompts, {data['steps']} steps), once with the fused kernel and once with "
             f"`{SWITCH}={KEEP}`, in one run.", "",
             "| build | attention | first-step agreement | agreement, all steps | logit cosine | KL (nats/cell) |",
             "|---|---|---|---|---|---|"]
    lines += [f"| `{Path(r['build']).name}` | {r['attention']} | {100 * r['first_step_agreement']:.1f}% | "
              f"{100 * r['agreement']:.1f}% | {r['cosine']:.5f} | {r['kl']:.4f} |" for r in data["rows"]]
    return lines
