"""bench/audiobook_bench.py on the tiny build: a real page from a real run, the book killed halfway and resumed
to the end, then one paragraph edited and only its sentences spoken (no timing assertions)."""

from __future__ import annotations

import json

from helpers.scripts import run_script
from helpers.synthesis_inputs import FP32_BUILD


def test_the_audiobook_bench_kills_resumes_and_re_speaks_an_edited_paragraph(builds, tmp_path):
    out = tmp_path / "audiobook.md"
    result = run_script("bench/audiobook_bench.py", "--model_dir", builds.get(*FP32_BUILD), "--words", "400",
                        "--chapters", "2", "--num_steps", "2", "--threads", "1", "--work", tmp_path / "work",
                        "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.with_suffix(".json").read_text())
    killed, resumed, edited = report["killed"], report["resumed"], report["edited"]
    total = resumed["total"]
    assert killed["kept"] >= total // 2 and resumed["spoke"] + resumed["reused"] == total
    assert resumed["reused"] >= killed["kept"] - 1  # a piece whose journal line the kill cut short is spoken again
    assert (edited["spoke"], edited["reused"]) == (2, total - 2)
    assert resumed["peak_mb"] > 0 and report["book_seconds"] > 0
    assert len(list((tmp_path / "work" / "chapters").glob("*.m4a"))) == 2
    assert "| **the whole book**, both runs" in out.read_text()
    refused = run_script("bench/audiobook_bench.py", "--model_dir", builds.get(*FP32_BUILD), "--work", tmp_path / "work")
    assert refused.returncode == 2 and "exists; give a new folder" in refused.stderr
