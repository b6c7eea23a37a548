"""bench/audiobook_bench.py: a book of about 10,000 words read into an M4B with chapter files and a read-along
EPUB through inference.py, as a user runs it: the wall time, the real-time factor and the peak memory; the
same run killed (SIGKILL) halfway and resumed; one paragraph edited and the book made again.

The book is written here (codes/checks/sample_book.py: novel), since no text can be downloaded. Each run is a
process of its own, its peak the process's VmHWM; the wall times include loading the model.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from codes.checks.bench import machine, machine_line
from codes.checks.sample_book import markdown, novel
from codes.runtime.book import book_script, parse_book

ROOT = Path(__file__).resolve().parents[2]
SUMMARY = re.compile(r"^spoke (\d+) of (\d+) segments, reused (\d+)$", re.M)
RTF = re.compile(r"^RTF [\d.]+ \(([\d.]+) s for ([\d.]+) s of audio", re.M)
# inference.py run as itself, its peak resident memory printed last on stderr (VmHWM: ru_maxrss would carry
# this wrapper's parent's across exec).
WRAPPER = ("import atexit, re, runpy, sys; "
           "atexit.register(lambda: print('VmHWM', re.search(r'VmHWM:\\s+(\\d+)', open('/proc/self/status').read())"
           ".group(1), file=sys.stderr)); sys.argv = ['inference.py'] + sys.argv[1:]; "
           "runpy.run_path('inference.py', run_name='__main__')")


def run_inference(args: list[str], kill_after: int | None = None, ledger: Path | None = None) -> dict:
    """One inference.py run: wall seconds, peak MB, and its summary; with kill_after, SIGKILLed once the
    ledger holds that many segments."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", WRAPPER, *map(str, args)], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        pieces = ledger / "pieces"
        while proc.poll() is None and len(list(pieces.glob("*.npz")) if pieces.is_dir() else []) < kill_after:
            time.sleep(0.5)
        proc.send_signal(signal.SIGKILL)
    stdout, stderr = proc.communicate()
    wall = time.perf_counter() - start
    result = {"wall_s": round(wall, 1), "returncode": proc.returncode}
    if kill_after is not None:
        result["kept"] = len(list((ledger / "pieces").glob("*.npz")))
        return result
    if proc.returncode != 0:
        raise RuntimeError(f"inference.py failed: {stderr.strip().splitlines()[-1:]}")
    spoke, total, reused = map(int, SUMMARY.search(stdout).groups())
    spent, audio = map(float, RTF.search(stdout).groups())
    peak = re.search(r"^VmHWM (\d+)$", stderr, re.M)
    result.update(spoke=spoke, total=total, reused=reused, speaking_s=spent, audio_s=audio,
                  peak_mb=round(int(peak.group(1)) / 1024) if peak else None)
    return result


def run_benchmark(model_dir: Path, work: Path, words: int, chapters: int, num_steps: int, threads: int | None,
                  seed: int = 0) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    book = novel(words, chapters)
    source = work / "book.md"
    source.write_text(markdown(book), encoding="utf-8")
    output = work / "book.m4b"
    args = ["--model_dir", model_dir, "--script", source, "--output", output, "--chapters", work / "chapters",
            "--read_along", work / "read-along.epub", "--num_steps", num_steps, "--seed", seed, "--quiet",
            "--speaker", "Narrator=instruct:female, low pitch", *(["--threads", threads] if threads else [])]
    ledger = output.with_name(output.name + ".ledger")
    report = {"machine": machine(), "words": book.words, "chapters": chapters, "num_steps": num_steps}
    total = len(book_script(parse_book(source.read_text(encoding="utf-8"), "markdown")).script.segments)
    report["killed"] = run_inference(args, kill_after=total // 2, ledger=ledger)
    report["resumed"] = run_inference(args)
    paragraph = book.chapters[len(book.chapters) // 2].paragraphs[1]  # mid-book
    edited = markdown(book).replace(paragraph, _edited(paragraph), 1)
    source.write_text(edited, encoding="utf-8")
    report["edited"] = run_inference(args)
    report["book_seconds"] = report["resumed"]["audio_s"]
    return report


def _edited(paragraph: str) -> str:
    """A paragraph with its first two sentences changed by a word each."""
    sentences = paragraph.split(". ")
    for index in range(min(2, len(sentences))):
        sentences[index] = sentences[index].replace(" the ", " that ", 1) if " the " in sentences[index] \
            else sentences[index] + " again"
    return ". ".join(sentences)


def markdown_page(report: dict, command: str, note: str = "") -> list[str]:
    killed, resumed, edited = report["killed"], report["resumed"], report["edited"]
    audio = report["book_seconds"]
    whole = killed["wall_s"] + resumed["wall_s"]
    lines = [
        f"# An audiobook: a {report['words']:,}-word book into an M4B, chapter files and a read-along EPUB",
        "",
        f"Measured on {machine_line(report['machine'])}, {report['num_steps']} decoding steps a sentence (the default "
        "is 32; fewer, for time), through `inference.py --script book.md --output book.m4b --chapters DIR "
        "--read_along FILE.epub`, one process a run.",
        "",
        f"The book: {report['words']} words in {report['chapters']} chapters, written here "
        "(`codes/checks/sample_book.py: novel`; no text can be downloaded on this machine), "
        f"{resumed['total']} sentences, {audio / 60:.1f} minutes of speech.",
        "",
        "| what | wall | segments | peak memory |",
        "|---|---|---|---|",
        f"| first run, killed (SIGKILL) once half the sentences were kept | {killed['wall_s']:.1f} s | "
        f"{killed['kept']} kept | |",
        f"| the same command again: resumed to the end | {resumed['wall_s']:.1f} s | spoke {resumed['spoke']}, "
        f"reused {resumed['reused']} | {resumed['peak_mb']} MB |",
        f"| **the whole book**, both runs: {audio:.1f} s of speech, RTF {whole / audio:.3f} | **{whole:.1f} s** | "
        f"{resumed['total']} | |",
        f"| one paragraph edited (2 sentences), the book made again | {edited['wall_s']:.1f} s | spoke {edited['spoke']}, "
        f"reused {edited['reused']} | {edited['peak_mb']} MB |",
        "",
        "Wall times include loading the model and writing every file: the M4B, one M4A a chapter, the read-along "
        "EPUB with an AAC file a chapter, and the loudness table. RTF: wall time over seconds of speech.",
    ]
    if note:
        lines += ["", note]
    lines += ["", f"Command: `{command}`"]
    return lines
