"""bench/script_bench.py's code on the tiny model: a smoke test of the workloads and the page (no timing assertions)."""

from __future__ import annotations

from helpers.synthesis_inputs import FP32_BUILD

from codes.checks.script_bench import dialogue, markdown, run_benchmark, subtitles
from codes.runtime.script import parse_script
from codes.runtime.script.segments import script_seconds


def test_the_workloads_are_a_dialogue_of_the_asked_length_and_an_srt_of_the_asked_cues():
    full = dialogue()
    script = parse_script(full.text, "text", ["Alice", "Bob"])
    assert 180 <= script_seconds(script) < 200 and {s.speaker for s in script.segments} == {"Alice", "Bob"}
    cues = parse_script(subtitles().text, "srt", ["Alice", "Bob"])
    assert len(cues.segments) == 40 and cues.warnings == ()  # every cue at a pace it can be spoken at


def test_both_modes_speak_the_same_audio_and_the_page_names_the_machine(builds):
    model_dir = builds.get(*FP32_BUILD)
    logged = []
    report = run_benchmark(model_dir, None, [dialogue(8.0), subtitles(3)], max_batch=4, num_steps=2, threads=1,
                           log=logged.append)
    rows = {(row["workload"], row["mode"]): row for row in report["rows"]}
    assert len(rows) == 4 and len(logged) == 4
    for workload in {name for name, _ in rows}:
        batched, alone = rows[(workload, "batched")], rows[(workload, "one by one")]
        assert batched["audio_s"] == alone["audio_s"] > 0 and batched["segments"] == alone["segments"]
        assert batched["steps"] < alone["steps"] == 2 * alone["segments"]
        assert batched["peak_mb"] > 0 and batched["rtf"] > 0
    page = "\n".join(markdown(report, "python bench/script_bench.py ..."))
    assert report["machine"]["cpu"] in page and "| SRT, 3 cues | batched | 4 | 3 |" in page
