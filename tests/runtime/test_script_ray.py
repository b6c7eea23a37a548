"""inference.py --script --ray: the segments spoken by actors on a local Ray give the file and the ledger a local
run gives, and an actor lost mid-piece is replaced and its piece spoken again."""

from __future__ import annotations

from helpers.faults import fault_hook
from helpers.scripts import run_script
from helpers.dubbing import CLI, CUES, fresh, model_dir, speakers, srt, summary, voices  # noqa: F401 (fixtures)

from codes.runtime.script.ledger import JOURNAL, ledger_folder


def test_a_script_on_ray_actors_writes_what_a_local_run_writes_even_when_an_actor_dies(model_dir, voices, fresh,
                                                                                       tmp_path):
    script, output = tmp_path / "dub.srt", tmp_path / "dub.wav"
    script.write_text(srt(CUES), encoding="utf-8")
    # The first actor to speak a piece dies there (SIGKILL): Ray starts it again and the piece is redone.
    env = fault_hook(tmp_path / "hooks", "codes.runtime.script.cluster", "PieceSpeaker", "speak", "die_once",
                     tmp_path / "hooks" / "died")
    result = run_script("inference.py", "--model_dir", model_dir, *CLI, "--script", script, "--output", output,
                        *speakers(voices), "--ray", "--actors", "2", env=env)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "hooks" / "died").exists()
    assert summary(result) == (6, 6, 0)
    assert output.read_bytes() == fresh.read_bytes()
    # Its ledger is a local run's: a local re-run reuses every segment.
    assert (ledger_folder(output) / JOURNAL).is_file()
    again = run_script("inference.py", "--model_dir", model_dir, *CLI, "--script", script, "--output", output,
                       *speakers(voices))
    assert summary(again) == (0, 6, 6) and output.read_bytes() == fresh.read_bytes()


def test_the_cluster_benchmark_runs_each_mode_and_they_write_one_file(model_dir, tmp_path):
    """bench/script_cluster_bench.py's code on the tiny model: a smoke test (no timing assertions)."""
    from codes.checks.script_cluster_bench import markdown, run_benchmark

    logged = []
    report = run_benchmark(model_dir, None, cues=3, num_steps=2, threads=2, work=tmp_path, log=logged.append)
    assert [row["mode"] for row in report["rows"]] == ["one actor", "2 actors", "no Ray"] and len(logged) == 3
    assert report["same_file"] and all(row["audio_s"] > 0 and row["rtf"] > 0 for row in report["rows"])
    page = "\n".join(markdown(report, "python bench/script_cluster_bench.py ..."))
    assert report["machine"]["cpu"] in page and "| 2 actors | `--ray --actors 2 --threads_per_actor 1` |" in page
    assert "one file, byte for byte" in page


def test_a_book_on_ray_actors_writes_the_book_a_local_run_writes(model_dir, voices, tmp_path):
    from codes.checks.sample_book import markdown, sample_book

    book = tmp_path / "book.md"
    book.write_text(markdown(sample_book(80, 2)), encoding="utf-8")
    made = {}
    for name, extra in (("local", ()), ("ray", ("--ray", "--actors", "2"))):
        output = tmp_path / name / "book.wav"
        output.parent.mkdir()
        result = run_script("inference.py", "--model_dir", model_dir, *CLI, "--script", book, "--output", output,
                            "--speaker", f"Narrator={voices['narrator']}", "--chapters", tmp_path / name / "chapters",
                            *extra)
        assert result.returncode == 0, result.stderr
        made[name] = [output.read_bytes()] + [p.read_bytes() for p in sorted((tmp_path / name / "chapters").iterdir())]
    assert len(made["ray"]) == 3 and made["ray"] == made["local"]
