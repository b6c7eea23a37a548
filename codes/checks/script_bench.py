"""bench/script_bench.py: a script spoken with its segments sharing decoding steps, against one at a time.

Two workloads, generated so every run speaks the same words: a two-speaker dialogue of about three
minutes (a text script), and a subtitle file of 40 cues (SRT). Both speakers are designed voices, made
once per script from their first segment (the dependency a real dialogue has). Each mode runs in a fresh
process, so its peak memory (VmHWM) is its own; the model's load is left out of the wall time. Modes
are interleaved across repeats, so a slow minute of a shared machine does not land on one mode.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from codes.checks.bench import machine, machine_line
from codes.runtime.script import Segment, format_timestamp, natural_seconds

SPEAKERS = ("Alice=instruct:female, low pitch", "Bob=instruct:male, british accent")
SENTENCES = (
    "Welcome back to the show.",
    "Today we are talking about how old railways shaped the towns along them.",
    "That sounds like a big subject.",
    "It is, so let us start with one line, the one that ran along the coast.",
    "Why that one?",
    "Because it was built in a hurry, in less than two years, and almost everything about it was improvised.",
    "I had no idea.",
    "The engineers borrowed bridges from other lines and moved them stone by stone.",
    "Stone by stone? That must have taken months.",
    "It did, and the villages it reached grew faster than anyone had planned for.",
    "So the railway came first and the town followed.",
    "Exactly, and you can still see it in the way the streets bend towards the old station.",
)
CUE_SECONDS = (2.0, 2.5, 3.0, 3.5, 4.0)
CUE_PAUSE = 0.4
MODES = {"batched": ("length", None), "one by one": ("length", 1)}  # (job order, max_batch: None = the run's)


@dataclass(frozen=True)
class Workload:
    name: str
    script_format: str
    text: str
    segments: int


def dialogue(seconds: float = 180.0) -> Workload:
    """Alice and Bob in turns of one or two sentences, until the script lasts `seconds` at the natural pace."""
    lines, total, index = [], 0.0, 0
    while total < seconds:
        speaker = ("Alice", "Bob")[len(lines) % 2]
        turn = " ".join(SENTENCES[(index + k) % len(SENTENCES)] for k in range(1 + len(lines) % 3 // 2))
        index += 1 + len(lines) % 3 // 2
        lines.append(f"{speaker}: {turn}")
        total += natural_seconds(Segment(turn))
    return Workload(f"dialogue, {total / 60:.1f} min at the natural pace", "text", "\n".join(lines) + "\n", len(lines))


def subtitles(cues: int = 40) -> Workload:
    """An SRT of `cues` cues (2 to 4 s each, CUE_PAUSE apart), each holding the sentence whose natural length
    is nearest its own, the two speakers in turn."""
    blocks, start_ms = [], 0
    for number in range(1, cues + 1):
        seconds = CUE_SECONDS[(number - 1) % len(CUE_SECONDS)]
        text = min(SENTENCES, key=lambda s: abs(natural_seconds(Segment(s)) - seconds))
        end_ms = start_ms + round(seconds * 1000)
        speaker = ("Alice", "Bob")[number % 2]
        blocks.append(f"{number}\n{format_timestamp(start_ms, ',')} --> {format_timestamp(end_ms, ',')}\n"
                      f">> {speaker}: {text}\n")
        start_ms = end_ms + round(CUE_PAUSE * 1000)
    return Workload(f"SRT, {cues} cues", "srt", "\n".join(blocks), cues)


WORKLOADS = {"dialogue": dialogue, "subtitles": subtitles}


def measure(model_dir: str, higgs_dir: str | None, workload: dict, max_batch: int, order: str, num_steps: int,
            threads: int | None, seed: int = 0) -> dict:
    """One run, in this process: the script spoken after the model is loaded and warmed by one short run."""
    import re

    from codes.runtime.contract.settings import GenerationSettings
    from codes.runtime.script import speak_script, parse_speakers
    from codes.runtime.synthesis import OmniVoiceOnnx

    tts = OmniVoiceOnnx(model_dir, higgs_dir=higgs_dir, threads=threads)
    tts.codec.load_decoder()
    settings = GenerationSettings(num_steps=num_steps)
    speakers = parse_speakers(SPEAKERS)
    speak_script(tts, text="Alice: Warm up.", speakers=speakers, settings=settings.replace(num_steps=1))
    start = time.perf_counter()
    rendered = speak_script(tts, text=workload["text"], script_format=workload["script_format"], speakers=speakers,
                            seed=seed, max_batch=max_batch, order=order, settings=settings)
    wall = time.perf_counter() - start
    audio = len(rendered.audio) / rendered.sample_rate
    peak_kb = int(re.search(r"VmHWM:\s+(\d+)", Path("/proc/self/status").read_text()).group(1))
    return {"wall_s": wall, "audio_s": audio, "rtf": wall / audio, "steps": rendered.steps,
            "segments": len(rendered.captions), "peak_mb": peak_kb / 1024}


def measure_in_child(model_dir: Path, higgs_dir: Path | None, workload: Workload, max_batch: int, order: str,
                     num_steps: int, threads: int | None) -> dict:
    root = Path(__file__).resolve().parents[2]
    code = ("import json, sys; sys.path.insert(0, sys.argv[1]); from codes.checks.script_bench import measure;"
            "print(json.dumps(measure(*json.loads(sys.argv[2]))))")
    args = [str(model_dir), str(higgs_dir) if higgs_dir else None, workload.__dict__, max_batch, order, num_steps,
            threads]
    out = subprocess.run([sys.executable, "-c", code, str(root), json.dumps(args)], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"the {workload.name} run failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def run_benchmark(model_dir: Path, higgs_dir: Path | None, workloads: list[Workload], max_batch: int, num_steps: int,
                  threads: int | None, repeats: int = 1, log=print) -> dict:
    made = {workload.name: workload for workload in workloads}
    runs: dict[tuple[str, str], list[dict]] = {}
    for repeat in range(repeats):
        for name, workload in made.items():
            modes = list(MODES) if repeat % 2 == 0 else list(reversed(MODES))
            for mode in modes:
                order, batch = MODES[mode]
                result = measure_in_child(model_dir, higgs_dir, workload, batch or max_batch, order, num_steps, threads)
                log(f"{workload.name}, {mode}: {result['wall_s']:.1f} s for {result['audio_s']:.1f} s of audio "
                    f"(RTF {result['rtf']:.3f}), {result['steps']} steps, peak {result['peak_mb']:.0f} MB")
                runs.setdefault((name, mode), []).append(result)
    rows = []
    for (name, mode), results in runs.items():
        best = min(results, key=lambda r: r["wall_s"])
        rows.append({"workload": name, "mode": mode, "max_batch": MODES[mode][1] or max_batch, **best,
                     "repeats": len(results)})
    return {"machine": machine(), "model_dir": str(model_dir), "num_steps": num_steps, "threads": threads,
            "rows": rows}


def markdown(report: dict, command: str, note: str = "") -> list[str]:
    lines = ["# Scripts: segments batched against one at a time", "",
             f"Command: `{command}`", "",
             f"Machine: {machine_line(report['machine'])}. Build: `{report['model_dir']}`, {report['num_steps']} "
             f"steps, threads {report['threads'] or 'all'}. Each mode in a fresh process; wall time from the model "
             "loaded and warmed (the best of the repeats), peak memory the process's whole (VmHWM).", "",
             "| workload | mode | max batch | segments | audio (s) | wall (s) | RTF | decoding steps | peak memory |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        lines.append(f"| {row['workload']} | {row['mode']} | {row['max_batch']} | {row['segments']} | "
                     f"{row['audio_s']:.1f} | {row['wall_s']:.1f} | {row['rtf']:.3f} | {row['steps']} | "
                     f"{row['peak_mb']:.0f} MB |")
    if note:
        lines += ["", note]
    return lines
