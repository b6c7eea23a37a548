"""The recipe's walkthrough, command for command, in an empty folder with the checkpoint at ./model/.

Each line runs through bash as a user types it (`python` is this environment's); after every
step the user's own files are still there and every build made so far still loads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from codes.export.generated_higgs import speech_like_signal
from codes.runtime.contract.manifest import read_manifest
from helpers.scripts import ROOT, run_main

WALKTHROUGH = """\
python optimize.py --device cpu      --output onnx/int4 --model ./model/
python optimize.py --device cpu_fp16 --output onnx      --model ./model/
python optimize.py --device gpu      --output onnx/cuda --model ./model/
python optimize.py --higgs-only --higgs-precision fp16 --output onnx --model ./model/
python optimize.py --device cpu_fp16 --include-higgs --output onnx --model ./model/
python inference.py --model_dir onnx      --higgs_dir onnx/audio_tokenizer --text "Hello from OmniVoice." --output out.wav
python inference.py --model_dir onnx/int4 --higgs_dir onnx/audio_tokenizer --text "Hello from OmniVoice." --output out_int4.wav
python higgs_inference.py --models-dir onnx/audio_tokenizer --input in.wav --output rt.wav
python eval.py --mode rtf   --model_dir onnx      --higgs_dir onnx/audio_tokenizer
python eval.py --mode rtf   --model_dir onnx/int4 --higgs_dir onnx/audio_tokenizer
python eval.py --mode equiv --model_dir onnx      --higgs_dir onnx/audio_tokenizer
"""
# What the user keeps beside the builds; no command may touch them.
USER_FILES = {"onnx/NOTES.txt": "my notes\n", "onnx/audio_tokenizer/README.local": "mine too\n"}
# Library chatter that a build must not print (it shows with --verbose).
NOISE = ("Warning", "INFO", "it/s]", "Couldn't find ffmpeg", "Please install tabulate", "Traceback")


def project_folder(tmp_path: Path, checkpoint: Path) -> Path:
    """An empty folder with the recipe's scripts and the checkpoint at ./model/."""
    folder = tmp_path / "recipe"
    folder.mkdir()
    for name in ("optimize.py", "inference.py", "eval.py", "higgs_inference.py", "user_script.py", "codes"):
        (folder / name).symlink_to(ROOT / name)
    (folder / "model").symlink_to(checkpoint)
    return folder


def run_line(folder: Path, line: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    return subprocess.run(["bash", "-c", line], cwd=folder, capture_output=True, text=True, env=env, timeout=900)


def test_the_recipe_walkthrough_runs_verbatim(tiny_checkpoint, tmp_path):
    folder = project_folder(tmp_path, tiny_checkpoint.path)
    soundfile.write(folder / "in.wav", speech_like_signal(2.0, seed=4), 24000)
    user_files_placed = False
    for line in WALKTHROUGH.splitlines():
        result = run_line(folder, line)
        assert result.returncode == 0, f"{line}\n{result.stdout}\n{result.stderr}"
        if line.startswith("python optimize.py"):
            printed = result.stdout + result.stderr
            assert not [n for n in NOISE if n in printed], f"{line} printed library output:\n{printed}"
        if not user_files_placed and (folder / "onnx" / "omnivoice_manifest.json").exists():
            for name, text in USER_FILES.items():
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                (folder / name).write_text(text)
            user_files_placed = True
        if user_files_placed:
            assert {name: (folder / name).read_text() for name in USER_FILES} == USER_FILES, line
        for build in ("onnx", "onnx/int4", "onnx/cuda"):
            if (folder / build / "omnivoice_manifest.json").exists():
                read_manifest(folder / build)  # every build made so far still verifies

    builds = {name: read_manifest(folder / name).data for name in ("onnx", "onnx/int4", "onnx/cuda")}
    assert {name: data["profile"] for name, data in builds.items()} == {
        "onnx": "cpu_fp16", "onnx/int4": "cpu", "onnx/cuda": "gpu"}
    codec = read_manifest(folder / "onnx/audio_tokenizer")
    assert codec.is_codec and codec.data["codec"]["precision"] == "fp16"
    assert builds["onnx"]["higgs_tokenizer"]["models_dir"] == "audio_tokenizer"
    assert "higgs_tokenizer" not in builds["onnx/int4"] and "higgs_tokenizer" not in builds["onnx/cuda"]
    for name in ("out.wav", "out_int4.wav", "rt.wav"):
        audio, rate = soundfile.read(folder / name)
        assert rate == 24000 and len(audio) > 0 and np.isfinite(audio).all(), name
    assert (folder / "bench" / "results.md").is_file()  # eval.py's default --out, inside the user's folder


def test_rebuilds_replace_only_their_own_files(tiny_checkpoint, tmp_path, monkeypatch):
    """A backbone rebuild keeps the codec and a codec rebuild keeps the backbone, byte for byte (optimize.py's
    main run in the user's folder, in this process: what is under test is the files, not the process)."""
    folder = project_folder(tmp_path, tiny_checkpoint.path)
    monkeypatch.chdir(folder)
    run_main("optimize.py", *"--device cpu_fp32 --include-higgs --output onnx --model ./model/".split(), check=True)
    codec_before = {p.name: p.read_bytes() for p in (folder / "onnx/audio_tokenizer").iterdir()}
    result = run_main("optimize.py", *"--device cpu --output onnx --model ./model/".split())
    assert result.returncode == 0, result.stderr
    assert {p.name: p.read_bytes() for p in (folder / "onnx/audio_tokenizer").iterdir()} == codec_before
    manifest = read_manifest(folder / "onnx")
    assert manifest.data["profile"] == "cpu" and manifest.codec()[0] == folder / "onnx/audio_tokenizer"

    backbone_before = {name: (folder / "onnx" / name).read_bytes() for name in manifest.data["files"]}
    result = run_main("optimize.py", *"--higgs-only --higgs-precision fp32 --output onnx --model ./model/".split())
    assert result.returncode == 0, result.stderr
    assert {name: (folder / "onnx" / name).read_bytes() for name in backbone_before} == backbone_before
    after = read_manifest(folder / "onnx")
    assert after.data["profile"] == "cpu" and after.higgs["precision"] == "fp32"
    assert after.codec()[1]["precision"] == "fp32"


@pytest.mark.parametrize("codec_flags", [["--include-higgs"], []], ids=["include-higgs", "higgs-only"])
def test_the_first_commands_work_with_default_folders(tiny_checkpoint, tmp_path, codec_flags):
    folder = project_folder(tmp_path, tiny_checkpoint.path)
    result = run_line(folder, 'python inference.py --text "Hello." --output out.wav')
    assert result.returncode == 2
    assert "python optimize.py --device cpu" in result.stderr.strip().splitlines()[-1]
    assert run_line(folder, " ".join(["python optimize.py --device cpu --model ./model/", *codec_flags])).returncode == 0
    if not codec_flags:
        result = run_line(folder, 'python inference.py --text "Hello." --output out.wav')
        assert result.returncode == 2 and "python optimize.py --higgs-only" in result.stderr.strip().splitlines()[-1]
        assert not (folder / "out.wav").exists()
        assert run_line(folder, "python optimize.py --higgs-only --model ./model/").returncode == 0
        assert read_manifest(folder / "models/higgs-fp16").codec()[1]["precision"] == "fp16"
    result = run_line(folder, 'python inference.py --text "Hello." --output out.wav')
    assert result.returncode == 0, result.stderr
    assert soundfile.info(folder / "out.wav").samplerate == 24000
    result = run_line(folder, "python eval.py --mode rtf --workload smoke --repeats 1 --no-memory --no-profile")
    assert result.returncode == 0, result.stderr
    report = json.loads((folder / "bench/results.json").read_text())
    assert report["results"]
