#!/usr/bin/env python3
"""Corpus throughput (audio seconds per wall second) for actor/thread layouts, run as a user runs corpus.py.

  python bench/corpus_bench.py --model_dir models/tiny-fp32 --rows 120 --layouts 1x2 2x1 --repeats 2
  python bench/corpus_bench.py --model_dir models/full-cpu-int8 --higgs_dir models/full-higgs --rows 4 --repeats 1

Each layout (ACTORSxTHREADS) speaks the same generated corpus into a fresh folder; layouts are
interleaved across repeats so a slow minute of a shared machine does not land on one layout.
Appends a section to --out (bench/corpus_results.md), with the CPU model and its ISA flags.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from codes.checks.results_page import bench_parser, cpu_info # noqa: E402  (the checkout's library, run as a script)
SENTENCES = [
    "The morning train was late again, so we walked along the river instead.",
    "Please keep this receipt until the order arrives.",
    "Numbers like twelve thousand four hundred are read out in full.",
    "She opened the window, and the sound of the market filled the room.",
    "Short line.",
    "If the weather holds, the climb to the summit takes about four hours, with two long rests on the way up.",
]
INSTRUCTS = [None, "female, low pitch", "male, british accent", None]
SPOKE = re.compile(r"of audio in ([\d.]+) s")


def write_corpus(folder: Path, rows: int) -> Path:
    path = folder / "bench_rows.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for i in range(rows):
            row = {"id": f"bench-{i:05d}", "text": SENTENCES[i % len(SENTENCES)], "language": "en"}
            if INSTRUCTS[i % len(INSTRUCTS)]:
                row["instruct"] = INSTRUCTS[i % len(INSTRUCTS)]
            f.write(json.dumps(row) + "\n")
    return path


def run_layout(model_dir: str, rows: Path, out: Path, actors: int, threads: int, extra: list[str]) -> dict:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, str(ROOT / "corpus.py"), "--model_dir", model_dir, "--input", str(rows),
                             "--output", str(out), "--actors", str(actors), "--threads-per-actor", str(threads),
                             *extra], cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - start
    match = SPOKE.search(result.stdout)
    if result.returncode != 0 or not match or " 0 failed" not in result.stdout:
        raise SystemExit(f"corpus.py failed for {actors}x{threads}:\n{result.stdout}\n{result.stderr}")
    records = [json.loads(line) for line in (out / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    audio = sum(r["audio_seconds"] for r in records)
    return {"audio_s": audio, "synthesis_s": float(match[1]), "command_s": wall}


def main() -> int:
    p = bench_parser(__doc__)
    p.add_argument("--model_dir", required=True)
    p.add_argument("--higgs_dir", help="a codec folder, when the build holds none")
    p.add_argument("--rows", type=int, default=120)
    p.add_argument("--layouts", nargs="+", default=["1x2", "2x1"], help="ACTORSxTHREADS")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--num_steps", type=int, default=32)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--label", default=None, help="section title (default: the model folder's name)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "corpus_results.md")
    args = p.parse_args()

    layouts = [tuple(int(n) for n in layout.split("x")) for layout in args.layouts]
    extra = ["--num_steps", str(args.num_steps), "--batch-size", str(args.batch_size)]
    if args.higgs_dir:
        extra += ["--higgs_dir", args.higgs_dir]
    measured: dict[tuple, list[dict]] = {layout: [] for layout in layouts}
    loads = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory(prefix="corpus-bench-") as tmp:
        rows = write_corpus(Path(tmp), args.rows)
        for repeat in range(args.repeats):
            for actors, threads in layouts:
                out = Path(tmp) / f"out-{actors}x{threads}-{repeat}"
                measured[(actors, threads)].append(run_layout(args.model_dir, rows, out, actors, threads, extra))
                loads.append(os.getloadavg()[0])
                last = measured[(actors, threads)][-1]
                print(f"{actors}x{threads} run {repeat + 1}: {last['audio_s']:.0f} s of audio, "
                      f"synthesis {last['synthesis_s']:.1f} s, command {last['command_s']:.1f} s", file=sys.stderr)

    model, isa, flags = cpu_info()
    label = args.label or Path(args.model_dir).name
    lines = [
        f"## {label}: {args.rows} rows, {args.num_steps} steps",
        "",
        f"Command: `python bench/corpus_bench.py --model_dir {args.model_dir} "
        + (f"--higgs_dir {args.higgs_dir} " if args.higgs_dir else "") + f"--rows {args.rows} "
        f"--layouts {' '.join(args.layouts)} --repeats {args.repeats} --num_steps {args.num_steps} "
        f"--batch-size {args.batch_size}"
        + (f" --label \"{label}\"" if args.label else "") + "`",
        "",
        f"Machine: {model}, {os.cpu_count()} CPUs (local Ray); ISA: {', '.join(isa)}; {date.today().isoformat()}. "
        f"Load average (1 min) during the runs: {min(loads):.1f}–{max(loads):.1f}.",
        "",
        "| actors x threads | audio s | synthesis s (median, min–max) | audio s per wall s (synthesis) "
        "| command s (median) | audio s per wall s (whole command) |",
        "|---|---|---|---|---|---|",
    ]
    for (actors, threads), runs in measured.items():
        audio = runs[0]["audio_s"]
        synthesis = [r["synthesis_s"] for r in runs]
        command = [r["command_s"] for r in runs]
        lines.append(f"| {actors} x {threads} | {audio:.0f} | {statistics.median(synthesis):.1f} "
                     f"({min(synthesis):.1f}–{max(synthesis):.1f}) | **{audio / statistics.median(synthesis):.2f}** "
                     f"| {statistics.median(command):.1f} | {audio / statistics.median(command):.2f} |")
    lines += ["", "Synthesis: from the actor pool's start (model loading included) to the last batch back; "
                  "the whole command adds starting Ray, reading and checking the rows, and writing the results.",
              "", f"<details><summary>lscpu flags</summary>\n\n{' '.join(flags)}\n\n</details>", "", ""]
    if not args.out.exists():
        args.out.write_text("# Corpus throughput: `corpus.py` on Ray Data\n\n", encoding="utf-8")
    with open(args.out, "a", encoding="utf-8") as f:
        f.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
