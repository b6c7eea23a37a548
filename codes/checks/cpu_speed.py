"""bench/cpu_speed.py: our builds against upstream PyTorch as a user meets them, on this CPU.

Each of our builds runs as a whole process (`inference.py ... --threads N`, wall clock from start to exit:
loading, the steps and the codec); upstream's `generate` is timed alone in a process that has loaded the
model first (torch.set_num_threads(N), in fp32 and, where the CPU has native bf16, in bf16). The runs are
interleaved round by round, so a busy spell of the host falls on all of them alike; each keeps its fastest.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from codes.common.errors import UserError
from codes.common.isa import cpu_flags
from codes.runtime.contract.native_kernels import KEEP, SWITCH, SWITCH_VALUES

ROOT = Path(__file__).resolve().parents[2]
TEXT = ("The committee will meet again next Thursday to review the budget, the schedule, and the remaining "
        "open questions.")
NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")
SWITCHED = "#kernels="  # a run key's mark: the build run with our kernels' switch set (OMNIVOICE_ONNX_KERNELS)

# Upstream's generate, timed alone: the model loads first, the clock covers only generate.
UPSTREAM = """
import json, sys, time, torch
from omnivoice.models.omnivoice import OmniVoice, OmniVoiceGenerationConfig
checkpoint, dtype, threads, text, seconds, steps = sys.argv[1:7]
torch.set_num_threads(int(threads))
model = OmniVoice.from_pretrained(checkpoint, attn_implementation="sdpa",
                                  dtype={"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]).eval()
model.audio_tokenizer.float()
config = OmniVoiceGenerationConfig(num_step=int(steps))
with torch.inference_mode():
    start = time.perf_counter()
    model.generate(text=text, language="en", duration=float(seconds), generation_config=config)
    print(json.dumps({"seconds": time.perf_counter() - start}))
"""


def upstream_dtypes(flags: frozenset[str] | None = None) -> list[str]:
    """fp32 everywhere; bf16 too where the CPU multiplies bf16 natively (elsewhere torch emulates it, slowly)."""
    flags = cpu_flags() if flags is None else flags
    return ["fp32"] + (["bf16"] if any(flag in flags for flag in NATIVE_BF16_FLAGS) else [])


def ours_command(build: Path, threads: int, seconds: float, steps: int, output: Path,
                 checkout: Path = ROOT) -> list[str]:
    """inference.py of `checkout` (this one, or another commit's worktree) speaking with `build`."""
    return [sys.executable, str(checkout / "inference.py"), "--model_dir", str(build), "--text", TEXT, "--language",
            "en", "--duration", str(seconds), "--num_steps", str(steps), "--threads", str(threads), "--output",
            str(output)]


def upstream_command(checkpoint: Path, dtype: str, threads: int, seconds: float, steps: int) -> list[str]:
    return [sys.executable, "-c", UPSTREAM, str(checkpoint), dtype, str(threads), TEXT, str(seconds), str(steps)]


def _run(command: list[str], cwd: Path = ROOT, env: dict | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, env={**os.environ, **(env or {})})
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"{Path(command[1]).name if command[1] != '-c' else 'upstream generate'} failed: {tail}")
    return done


def measure(builds: list[Path], checkpoint: Path | None, threads: int, seconds: float, steps: int, rounds: int,
            work: Path, log=print, first_checkout: Path | None = None, switches: list[str] = ()) -> dict:
    """Fastest seconds of each build's whole process and of upstream's generate per dtype, over `rounds`
    interleaved rounds. first_checkout: run the first build with that checkout's inference.py (an older
    commit's worktree: its build as that commit ran it). switches: each build this checkout runs also runs with
    OMNIVOICE_ONNX_KERNELS set to each (onnx: ONNX Runtime's own ops; avx2: our kernels at 8 lanes), beside our
    kernels at their widest."""
    for build in builds:
        if not (build / "omnivoice_manifest.json").is_file():
            raise UserError(f"{build} has no omnivoice_manifest.json; pass a folder optimize.py built")
    if first_checkout is not None and not (first_checkout / "inference.py").is_file():
        raise UserError(f"{first_checkout} has no inference.py; pass a checkout (git worktree add DIR COMMIT)")
    checkouts = [first_checkout or ROOT] + [ROOT] * (len(builds) - 1)
    rows = [(build, checkout, f"ours:{build}" + (f"@{checkout}" if checkout != ROOT else ""), None)
            for build, checkout in zip(builds, checkouts)]
    rows += [(build, ROOT, f"ours:{build}{SWITCHED}{value}", {SWITCH: value})
             for value in switches for build, checkout in zip(builds, checkouts) if checkout == ROOT]
    work.mkdir(parents=True, exist_ok=True)
    runs: dict[str, list[float]] = {}
    for round_ in range(rounds):
        for i, (build, checkout, key, env) in enumerate(rows):
            start = time.perf_counter()
            _run(ours_command(build.resolve(), threads, seconds, steps, (work / f"ours{i}.wav").resolve(), checkout),
                 cwd=checkout, env=env)
            runs.setdefault(key, []).append(time.perf_counter() - start)
            log(f"round {round_ + 1}: {key[5:]} {runs[key][-1]:.2f} s")
        for dtype in upstream_dtypes() if checkpoint is not None else []:
            done = _run(upstream_command(checkpoint, dtype, threads, seconds, steps))
            runs.setdefault(f"upstream:{dtype}", []).append(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])
            log(f"round {round_ + 1}: upstream {dtype} {runs[f'upstream:{dtype}'][-1]:.2f} s")
    return {"threads": threads, "seconds": seconds, "steps": steps, "rounds": rounds, "text": TEXT,
            "checkpoint": str(checkpoint) if checkpoint else None, "runs": runs,
            "checkouts": {str(first_checkout): checkout_commit(first_checkout)} if first_checkout else {}}


def checkout_commit(checkout: Path) -> str | None:
    """The commit a checkout has out (None: not a git checkout)."""
    done = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def page(data: dict, machine_line: str, command: str) -> list[str]:
    runs = {key: min(values) for key, values in data["runs"].items()}
    ours = [key for key in runs if key.startswith("ours:")]
    upstream = [key for key in runs if key.startswith("upstream:")]
    base = ours[0]
    # each of our rows' build as run on ONNX Runtime's own ops, where the run has it (--kernels onnx)
    on_onnx = {key: f"{key.partition(SWITCHED)[0]}{SWITCHED}{KEEP}" for key in ours}
    on_onnx = {key: same for key, same in on_onnx.items() if same in runs}
    lines = ["# Our builds against upstream PyTorch on this CPU", "",
             f"Machine: {machine_line}; {data['threads']} threads. Made by `{command}`.", "",
             f"A {data['seconds']:g} s utterance at {data['steps']} steps (\"{data['text']}\"). Ours: `inference.py` "
             "as a whole process (load, steps, codec, the WAV written). Upstream: `generate` alone, the model "
             f"loaded first. Fastest of {data['rounds']} interleaved rounds (all runs in the .json).", "",
             "| what | seconds | against the first build | the same, median of the rounds |"
             + "".join(f" against upstream {key.split(':')[1]} |" for key in upstream)
             + (" against the same build on ONNX Runtime's own ops, median of the rounds |" if on_onnx else ""),
             "|---|---|---|---|" + "---|" * (len(upstream) + bool(on_onnx))]
    for key in ours + upstream:
        name = _ours_name(key, data.get("checkouts", {})) if key in ours else f"upstream {key.split(':')[1]}, generate alone"
        cells = ([f"{runs[base] / runs[key]:.2f}x", f"{round_ratio(data['runs'][base], data['runs'][key]):.2f}x"]
                 + [f"{runs[other] / runs[key]:.2f}x" for other in upstream])
        if on_onnx:
            same = on_onnx.get(key)
            cells.append(f"{round_ratio(data['runs'][same], data['runs'][key]):.2f}x" if same not in (None, key) else "")
        lines.append(f"| {name} | {runs[key]:.2f} | " + " | ".join(cells) + " |")
    lines += ["", "A ratio is how many times faster the row is than the column's run (above 1: faster). The median "
              "of the rounds takes each round's ratio of the two runs it interleaved, so a slow spell of the host "
              "that falls on one round weighs on neither side alone."]
    return lines


def round_ratio(base: list[float], other: list[float]) -> float:
    """The median over rounds of base's seconds over other's, each round's two runs side by side."""
    return statistics.median(b / o for b, o in zip(base, other))


def _ours_name(key: str, commits: dict[str, str | None]) -> str:
    name, _, switch = key.partition(SWITCHED)
    build, _, checkout = name.split(":", 1)[1].partition("@")
    by = f", run by {commits[checkout]}'s checkout" if commits.get(checkout) else f", run by the checkout {checkout}"
    return (f"`{Path(build).name}`, whole process" + (by if checkout else "")
            + (f", {SWITCH_VALUES[switch]} (`{SWITCH}={switch}`)" if switch else ""))
