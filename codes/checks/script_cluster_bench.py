"""bench/script_cluster_bench.py: a long SRT spoken by inference.py --script, each run a fresh command as a user
runs it: on Ray actors, one actor against two, beside the same command without Ray (`--compare ray`); or without
word captions against with them (`--compare words`: what --caption_words adds to a dub, its pieces sharing the
aligner's windows).

The wall time is the whole command's (Ray's start and every actor's model load included: what a user waits
for), and the RTF is that over the track's length. Every run writes no ledger (--no_ledger), so each speaks
every cue; their files are compared, and must be one file.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time
from pathlib import Path

from codes.checks.results_page import machine, machine_line
from codes.checks.script_bench import SPEAKERS, subtitles

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"RTF [\d.]+ \([\d.]+ s for ([\d.]+) s of audio")


COMPARISONS = ("ray", "words")


def modes(threads: int, compare: str, work: Path) -> dict[str, list[str]]:
    """The runs compared (the first is the base): name -> inference.py's flags."""
    if compare == "words":
        return {"without word captions": ["--threads", str(threads)],
                "with word captions": ["--threads", str(threads), "--captions", str(work / "words.srt"),
                                       "--caption_words"]}
    return {"one actor": ["--ray", "--actors", "1", "--threads_per_actor", str(threads)],
            f"{threads} actors": ["--ray", "--actors", str(threads), "--threads_per_actor", "1"],
            "no Ray": ["--threads", str(threads)]}


def run_mode(model_dir: Path, higgs_dir: Path | None, script: Path, output: Path, flags: list[str],
             num_steps: int, seed: int) -> dict:
    args = [sys.executable, str(ROOT / "inference.py"), "--model_dir", str(model_dir),
            *(["--higgs_dir", str(higgs_dir)] if higgs_dir else []), "--script", str(script), "--output", str(output),
            "--num_steps", str(num_steps), "--seed", str(seed), "--no_ledger", "--quiet",
            *[item for speaker in SPEAKERS for item in ("--speaker", speaker)], *flags]
    start = time.perf_counter()
    done = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(flags)} failed:\n{done.stderr[-3000:]}")
    audio = float(SUMMARY.search(done.stdout).group(1))
    return {"wall_s": wall, "audio_s": audio, "rtf": wall / audio,
            "sha256": hashlib.sha256(output.read_bytes()).hexdigest()}


def run_benchmark(model_dir: Path, higgs_dir: Path | None, cues: int, num_steps: int, threads: int, work: Path,
                  seed: int = 0, compare: str = "ray", log=print) -> dict:
    workload = subtitles(cues)
    script = work / "cues.srt"
    script.write_text(workload.text, encoding="utf-8")
    rows = []
    for name, flags in modes(threads, compare, work).items():
        result = run_mode(model_dir, higgs_dir, script, work / f"{name.replace(' ', '_')}.wav", flags, num_steps, seed)
        log(f"{workload.name}, {name}: {result['wall_s']:.1f} s for {result['audio_s']:.1f} s of audio "
            f"(RTF {result['rtf']:.3f})")
        rows.append({"mode": name, "flags": " ".join(flags), **result})
    return {"machine": machine(), "model_dir": str(model_dir), "num_steps": num_steps, "workload": workload.name,
            "cues": cues, "compare": compare, "rows": rows, "same_file": len({row["sha256"] for row in rows}) == 1}


def markdown(report: dict, command: str, note: str = "") -> list[str]:
    base = report["rows"][0]
    title = ("# A dub's word captions: what --caption_words adds" if report.get("compare") == "words"
             else "# Scripts on a cluster: one Ray actor against several")
    lines = [title, "",
             f"Command: `{command}`", "",
             f"Machine: {machine_line(report['machine'])}. Build: `{report['model_dir']}`, {report['num_steps']} "
             f"steps. {report['workload']}, two designed speakers. Each run a fresh `inference.py --script` command; "
             "wall time the whole command's (model loads, and Ray's start and the actors' where they run, included).",
             "", f"| run | flags | audio (s) | wall (s) | RTF | against {base['mode']} |", "|---|---|---|---|---|---|"]
    for row in report["rows"]:
        lines.append(f"| {row['mode']} | `{row['flags']}` | {row['audio_s']:.1f} | {row['wall_s']:.1f} | "
                     f"{row['rtf']:.3f} | {row['wall_s'] / base['wall_s']:.2f}x |")
    lines += ["", "The runs wrote one file, byte for byte." if report["same_file"]
              else "**The runs wrote different files.**"]
    if note:
        lines += ["", note]
    return lines
