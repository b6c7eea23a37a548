"""A script's ledger (inference.py --script, codes/runtime/script/ledger.py): a re-run speaks only the segments
whose fingerprint is new and writes the file a fresh run writes, a killed run (SIGKILL, SIGTERM) resumes, an
edited cue or a changed voice re-speaks only what it touches, and a damaged or foreign ledger is said and
worked around, never trusted or crashed on."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time

import pytest
from helpers.dubbing import CLI, CUES, fresh, model_dir, speak, speakers, srt, summary, voices  # noqa: F401 (fixtures)
from helpers.faults import fault_hook
from helpers.scripts import ROOT, last_error_line, run_main

from codes.runtime.script.ledger import JOURNAL, PIECES, ledger_folder

def killed_run(model_dir, voices, script, output, hooks, sig, after=2) -> subprocess.CompletedProcess:
    """inference.py stopped by `sig` once it has kept `after` segments (it waits there until the signal)."""
    marker = hooks / "paused"
    env = {**os.environ, **fault_hook(hooks, "codes.runtime.script.ledger", "ScriptLedger", "keep", "pause", marker, after)}
    args = [sys.executable, str(ROOT / "inference.py"), "--model_dir", str(model_dir), *CLI, "--script", str(script),
            "--output", str(output), *speakers(voices)]
    run = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 300
    while not marker.exists() and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), run.communicate()
    run.send_signal(sig)
    stdout, stderr = run.communicate(timeout=120)
    return subprocess.CompletedProcess(args, run.returncode, stdout, stderr)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_dub_resumes_into_the_file_an_uninterrupted_run_writes(sig, model_dir, voices, fresh, tmp_path):
    (tmp_path / "dub.srt").write_text(srt(CUES), encoding="utf-8")
    output = tmp_path / "dub.wav"
    stopped = killed_run(model_dir, voices, tmp_path / "dub.srt", output, tmp_path / "hooks", sig)
    if sig == signal.SIGTERM:
        assert stopped.returncode == 130
        assert "run the same command again to resume" in last_error_line(stopped)
    else:
        assert stopped.returncode == -signal.SIGKILL
    assert not output.exists()  # never a half-made output in its place
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # nor a part beside it
    resumed = speak(model_dir, tmp_path / "dub.srt", output, *speakers(voices))
    spoke, total, reused = summary(resumed)
    assert (total, reused) == (6, 2) and spoke == 4
    assert output.read_bytes() == fresh.read_bytes()
    again = speak(model_dir, tmp_path / "dub.srt", output, *speakers(voices))
    assert summary(again) == (0, 6, 6) and output.read_bytes() == fresh.read_bytes()
    assert not [p for p in ledger_folder(output).rglob(".*")]  # the killed run's parts are gone


def test_an_edited_cue_re_speaks_that_cue_alone_and_equals_a_fresh_run(model_dir, voices, tmp_path):
    script, output = tmp_path / "dub.srt", tmp_path / "dub.wav"
    script.write_text(srt(CUES), encoding="utf-8")
    assert summary(speak(model_dir, script, output, *speakers(voices))) == (6, 6, 0)
    rewritten = [*CUES[:2], (CUES[2][0], CUES[2][1], "The third cue, rewritten."), *CUES[3:]]
    edits = {"text": rewritten, "timing": [*rewritten[:4], (CUES[4][0], "00:00:06,700", CUES[4][2]), *CUES[5:]]}
    for what, cues in edits.items():
        script.write_text(srt(cues), encoding="utf-8")
        assert summary(speak(model_dir, script, output, *speakers(voices))) == (1, 6, 5), what
        speak(model_dir, script, tmp_path / f"fresh-{what}.wav", "--no_ledger", *speakers(voices))
        assert output.read_bytes() == (tmp_path / f"fresh-{what}.wav").read_bytes(), what
    # The pieces the edits replaced are gone from the ledger; the script's six are there.
    assert len(list((ledger_folder(output) / PIECES).iterdir())) == 6


def test_a_changed_voice_re_speaks_only_its_speakers_segments_and_a_renamed_file_none(model_dir, voices, tmp_path):
    script, output = tmp_path / "dub.srt", tmp_path / "dub.wav"
    script.write_text(srt(CUES), encoding="utf-8")
    speak(model_dir, script, output, *speakers(voices))
    # The same voice under another file name is the same voice: nothing is spoken.
    assert summary(speak(model_dir, script, output, *speakers(voices, narrator="narrator_copy"))) == (0, 6, 6)
    # Alice's voice is now the narrator's: her two cues are spoken again, and only they.
    changed = speak(model_dir, script, output, *speakers(voices, alice="narrator"))
    assert summary(changed) == (2, 6, 4)
    speak(model_dir, script, tmp_path / "fresh.wav", "--no_ledger", *speakers(voices, alice="narrator"))
    assert output.read_bytes() == (tmp_path / "fresh.wav").read_bytes()


def test_a_designed_speakers_first_segment_carries_its_voice_so_editing_it_re_speaks_the_speaker(model_dir, voices,
                                                                                                 tmp_path):
    script, output = tmp_path / "dialogue.txt", tmp_path / "dialogue.wav"
    lines = ["Narrator: Welcome in.", "Bob: I am the designed one.", "Narrator: Back to me.", "Bob: Me again.",
             "Bob: And a third time."]
    designed = ["--speaker", f"Narrator={voices['narrator']}", "--speaker", "Bob=instruct:male, low pitch"]
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert summary(speak(model_dir, script, output, *designed)) == (5, 5, 0)
    lines[1] = "Bob: I am the designed one, edited."
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    edited = speak(model_dir, script, output, *designed)
    assert summary(edited) == (3, 5, 2)  # Bob throughout: his first segment is his voice
    speak(model_dir, script, tmp_path / "fresh.wav", "--no_ledger", *designed)
    assert output.read_bytes() == (tmp_path / "fresh.wav").read_bytes()
    # A later segment of his alone: his voice is kept, so only that segment.
    lines[4] = "Bob: And a fourth time."
    script.write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert summary(speak(model_dir, script, output, *designed)) == (1, 5, 4)


def test_a_damaged_ledger_is_said_in_one_line_and_only_what_it_lost_is_spoken(model_dir, voices, fresh, tmp_path):
    script, output = tmp_path / "dub.srt", tmp_path / "dub.wav"
    script.write_text(srt(CUES), encoding="utf-8")
    speak(model_dir, script, output, *speakers(voices))
    folder = ledger_folder(output)
    journal = folder / JOURNAL
    lines = journal.read_text(encoding="utf-8").splitlines(keepends=True)
    pieces = sorted((folder / PIECES).iterdir())
    # One piece's record cut mid-line (as a kill leaves it), and another piece's file truncated.
    damaged_record = next(i for i, line in enumerate(lines) if '"fingerprint"' in line)
    intact = [p for p in pieces if p.stem not in lines[damaged_record]]
    lines[damaged_record] = lines[damaged_record][:25] + "\n"
    journal.write_text("".join(lines), encoding="utf-8")
    intact[0].write_bytes(intact[0].read_bytes()[:100])
    result = speak(model_dir, script, output, *speakers(voices))
    assert summary(result) == (2, 6, 4)
    notes = [line for line in result.stderr.splitlines() if str(folder) in line]
    assert any("1 damaged line" in line for line in notes) and any("damaged or missing" in line for line in notes)
    assert output.read_bytes() == fresh.read_bytes()
    # A journal of nothing but junk is a fresh start, never a crash.
    journal.write_bytes(b"\x00\xff garbage\n{not json\n")
    assert summary(speak(model_dir, script, output, *speakers(voices)))[2] == 0
    assert output.read_bytes() == fresh.read_bytes()


def test_a_ledger_of_another_build_or_an_output_changed_since_is_said_not_trusted(model_dir, voices, fresh, tmp_path):
    script, output = tmp_path / "dub.srt", tmp_path / "dub.wav"
    script.write_text(srt(CUES), encoding="utf-8")
    speak(model_dir, script, output, *speakers(voices))
    journal = ledger_folder(output) / JOURNAL
    text = journal.read_text(encoding="utf-8")
    journal.write_text(re.sub(r'\{"build": "[0-9a-f]+"\}', '{"build": "0123456789abcdef0123456789abcdef"}', text, 1),
                       encoding="utf-8")
    output.write_bytes(b"someone edited this file")
    result = speak(model_dir, script, output, *speakers(voices))
    assert "was written by another build" in result.stderr
    assert "is not the file this ledger last wrote" in result.stderr
    assert summary(result) == (6, 6, 0)
    assert output.read_bytes() == fresh.read_bytes()


def test_a_folder_in_the_ledgers_place_is_never_used_or_touched(model_dir, voices, tmp_path):
    script, output = tmp_path / "dub.srt", tmp_path / "dub.wav"
    script.write_text(srt(CUES), encoding="utf-8")
    theirs = ledger_folder(output)
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine", encoding="utf-8")
    result = run_main("inference.py", "--model_dir", model_dir, *CLI, "--script", script, "--output", output,
                      *speakers(voices))
    assert result.returncode == 2
    assert last_error_line(result).startswith(f"error: {theirs} holds files that are not a script ledger")
    assert sorted(p.name for p in theirs.iterdir()) == ["notes.txt"] and not output.exists()
    # A run that fails before it keeps a segment (a speaker's voice file unreadable) leaves no ledger behind.
    (tmp_path / "bad.npz").write_bytes(b"not a voice")
    other = tmp_path / "other.wav"
    failed = run_main("inference.py", "--model_dir", model_dir, *CLI, "--script", script, "--output", other,
                      "--speaker", f"Narrator={tmp_path / 'bad.npz'}", "--speaker", f"ALICE={voices['alice']}")
    assert failed.returncode == 2 and not other.exists() and not ledger_folder(other).exists()
