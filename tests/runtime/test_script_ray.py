"""inference.py --script --ray: the segments spoken by actors on a local Ray give the file and the ledger a local
run gives, and an actor lost mid-piece is replaced and its piece spoken again."""

from __future__ import annotations

from helpers.faults import pause_hook
from helpers.scripts import run_script
from helpers.dubbing import CLI, CUES, fresh, model_dir, speakers, srt, summary, voices  # noqa: F401 (fixtures)

from codes.runtime.script.ledger import JOURNAL, ledger_folder


def test_a_script_on_ray_actors_writes_what_a_local_run_writes_even_when_an_actor_dies(model_dir, voices, fresh,
                                                                                       tmp_path):
    script, output = tmp_path / "dub.srt", tmp_path / "dub.wav"
    script.write_text(srt(CUES), encoding="utf-8")
    # The first actor to speak a piece dies there (SIGKILL): Ray starts it again and the piece is redone.
    env = pause_hook(tmp_path / "hooks", "codes.runtime.script.cluster", "PieceSpeaker", "speak", 0,
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
