"""A six-cue, two-speaker dub and its fresh run, shared by the ledger's tests and the Ray ones."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from helpers.scripts import run_main
from helpers.synthesis_inputs import REF_TEXT, reference_clip, write_clip

from codes.runtime.script.ledger import ledger_folder
from codes.runtime.synthesis import OmniVoiceOnnx

RATE = 24000
CLI = ("--num_steps", "4", "--position_temperature", "0", "--threads", "1", "--quiet", "--seed", "3")
SUMMARY = re.compile(r"^spoke (\d+) of (\d+) segments, reused (\d+)$")

# Six cues, two speakers: Alice by her prefix, the rest the narrator.
CUES = [("00:00:00,200", "00:00:01,400", "The first cue of six."),
        ("00:00:01,600", "00:00:02,800", "ALICE: Alice answers here."),
        ("00:00:03,000", "00:00:04,100", "The third cue goes on."),
        ("00:00:04,300", "00:00:05,500", "ALICE: She speaks once more."),
        ("00:00:05,700", "00:00:06,900", "A fifth cue, nearly done."),
        ("00:00:07,100", "00:00:08,300", "And the last one.")]


def srt(cues) -> str:
    return "".join(f"{i}\n{start} --> {end}\n{text}\n\n" for i, (start, end, text) in enumerate(cues, 1))


@pytest.fixture(scope="module")
def model_dir(served_build):
    return served_build


@pytest.fixture(scope="module")
def voices(model_dir, tmp_path_factory) -> dict[str, Path]:
    """Two voice files cloned from two clips, and a copy of the first under another name."""
    tts = OmniVoiceOnnx(model_dir, threads=1)
    folder = tmp_path_factory.mktemp("voices")
    made = {}
    for name, scale in (("narrator", 1.0), ("alice", 0.5)):
        clip = write_clip(folder / f"{name}.wav", reference_clip(RATE) * scale, RATE)
        made[name] = folder / f"{name}.npz"
        tts.create_voice(clip, REF_TEXT).save(made[name])
    made["narrator_copy"] = folder / "renamed.npz"
    made["narrator_copy"].write_bytes(made["narrator"].read_bytes())
    return made


def speakers(voices, narrator="narrator", alice="alice") -> list[str]:
    return ["--speaker", f"Narrator={voices[narrator]}", "--speaker", f"ALICE={voices[alice]}"]


def speak(model_dir, script: Path, output: Path, *extra):
    result = run_main("inference.py", "--model_dir", model_dir, *CLI, "--script", script, "--output", output, *extra)
    assert result.returncode == 0, result.stderr
    return result


def summary(result) -> tuple[int, int, int]:
    match = SUMMARY.match(result.stdout.strip().splitlines()[-1])
    assert match, result.stdout
    return tuple(map(int, match.groups()))


@pytest.fixture(scope="module")
def fresh(model_dir, voices, tmp_path_factory):
    """The six cues spoken by a fresh run without a ledger: what every resumed or re-run file must equal."""
    folder = tmp_path_factory.mktemp("fresh")
    (folder / "dub.srt").write_text(srt(CUES), encoding="utf-8")
    speak(model_dir, folder / "dub.srt", folder / "fresh.wav", "--no_ledger", *speakers(voices))
    assert not ledger_folder(folder / "fresh.wav").exists()
    return folder / "fresh.wav"
