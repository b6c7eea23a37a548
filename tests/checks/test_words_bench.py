"""bench/words_bench.py on the tiny aligner: a real page from a real run, each aligner's stages timed and its
words held to openai-whisper's on the weights it was built from (no timing assertions: speeds are this machine's)."""

from __future__ import annotations

import json

from helpers.scripts import run_script
from helpers.synthesis_inputs import FP32_BUILD


def test_the_words_bench_times_each_aligner_and_compares_it_with_openai_whisper(builds, tmp_path):
    build = builds.get(*FP32_BUILD, "--include-aligner", "--aligner-model", "tiny-whisper")
    out = tmp_path / "words.md"
    result = run_script("bench/words_bench.py", "--aligner", build, "--compare", "--seconds", "2", "5",
                        "--repeats", "1", "--threads", "1", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.with_suffix(".json").read_text())
    (costs,) = report["costs"]
    assert costs["source"] == "tiny-whisper" and costs["precision"] == "fp32"
    for row in costs["clips"]:
        assert row["encoder_s"] > 0 and row["decoder_s"] > 0 and row["dtw_s"] > 0 and row["windows"] == 1
    assert report["exactness"] and all(row["same_words"] for row in report["exactness"])
    assert all(row["largest_difference_s"] <= 0.02 + 1e-6 for row in report["exactness"])
    assert "| tiny-whisper | fp32 | 2 s |" in out.read_text()
