"""The Node runtime (web/, its CLI as a user runs it) against upstream OmniVoice on the tiny fp32 build.

At temperature 0 decoding is deterministic, so the codes must equal upstream's token for token: languages,
voice design, a non-verbal tag, digits, and a clone from a 24 kHz WAV. With a seed and the default
temperatures the noise is numpy's PCG64 on both sides, so Node's codes must equal inference.py's.
"""

from __future__ import annotations

import subprocess

import numpy as np
import pytest
import torch
from helpers.scripts import ROOT, run_script
from helpers.synthesis_inputs import FP32_BUILD, REF_TEXT, reference_clip, write_clip
from helpers.upstream_twins import recorded_codes, tiny_upstream

from omnivoice.models.omnivoice import OmniVoiceGenerationConfig

CLI = ROOT / "web" / "bin" / "omnivoice.mjs"
STEPS = 8
GREEDY = ("--position_temperature", "0", "--class_temperature", "0")
# (text, language, instruct): scripts, a language by name, voice design, a tag, digits.
CASES = {
    "en": ("Hello there, how are you today?", "en", None),
    "zh-design-tag": ("你好，世界。今天天气很好 [laughter]。", "Chinese", "female, low pitch"),
    "accent": ("A third one, somewhat longer than the others.", None, "male, british accent"),
    "digits": ("Call 555 0123 before 9 pm on the 21st, or 3.5 hours later.", "English", None),
    "fr": ("Bonjour à tous, il fait très beau aujourd'hui.", "fr", None),
}


@pytest.fixture(scope="module")
def upstream(tiny_checkpoint):
    with tiny_upstream(tiny_checkpoint.path) as model:
        yield model


@pytest.fixture(scope="module")
def build(builds):
    return builds.get(*FP32_BUILD)


def node_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(CLI), *map(str, args)], capture_output=True, text=True, timeout=600)


def node_codes(build, tmp_path, name: str, *args: str) -> np.ndarray:
    codes = tmp_path / f"{name}.npy"
    result = node_cli("--model_dir", build, "--output", tmp_path / f"{name}.wav", "--codes_out", codes, *args)
    assert result.returncode == 0, result.stderr
    return np.load(codes)


def request_flags(text: str, language: str | None, instruct: str | None) -> list[str]:
    flags = ["--text", text]
    if language is not None:
        flags += ["--language", language]
    if instruct is not None:
        flags += ["--instruct", instruct]
    return flags


@pytest.mark.parametrize("case", CASES)
def test_node_gives_upstreams_codes_at_temperature_zero(case, upstream, build, tmp_path):
    text, language, instruct = CASES[case]
    config = OmniVoiceGenerationConfig(num_step=STEPS, position_temperature=0.0, class_temperature=0.0)
    with torch.inference_mode():
        task = upstream._preprocess_all(text=[text], language=[language], instruct=[instruct])
        expected = upstream._generate_iterative(task, config)[0].numpy()
    ours = node_codes(build, tmp_path, case, *request_flags(text, language, instruct), "--num_steps", STEPS, *GREEDY)
    assert ours.dtype == np.int64 and ours.shape == expected.shape
    assert (ours == expected).all(), f"{np.mean(ours == expected):.2%} of codes agree"


def test_node_clones_from_a_24k_wav_as_upstream_does(upstream, build, tmp_path):
    clip = write_clip(tmp_path / "reference.wav", reference_clip(24000, seed=0, peak=0.08), 24000)
    text = "Nice to hear it cloned."
    with recorded_codes(upstream) as calls:
        upstream.generate(text, language="en", ref_audio=str(clip), ref_text=REF_TEXT, num_step=STEPS,
                          position_temperature=0.0, class_temperature=0.0)
    ours = node_codes(build, tmp_path, "clone", "--text", text, "--language", "en", "--ref_audio", clip,
                      "--ref_text", REF_TEXT, "--num_steps", STEPS, *GREEDY)
    assert (ours == calls[0][0]).all(), f"{np.mean(ours == calls[0][0]):.2%} of codes agree"


@pytest.mark.parametrize("seed", ["7", str(2**64 + 5)])
def test_a_seed_gives_inference_pys_codes(seed, build, tmp_path):
    """The default temperatures draw noise: the same seed is the same PCG64 stream on both sides (a seed past
    2**53 too), so the codes and the audio's length agree."""
    args = ("--text", "The same seed should give the same speech.", "--language", "en", "--num_steps", "16",
            "--seed", seed)
    python_codes = tmp_path / "python.npy"
    result = run_script("inference.py", "--model_dir", build, "--output", tmp_path / "python.wav",
                        "--codes_out", python_codes, *args)
    assert result.returncode == 0, result.stderr
    ours = node_codes(build, tmp_path, "node", *args)
    assert (ours == np.load(python_codes)).all()


@pytest.mark.parametrize("profile", ["cpu", "cpu_int8", "cpu_fp16", "web"])
def test_every_cpu_profile_speaks_in_node_as_in_python(profile, builds, tmp_path):
    """Node loads each CPU build the Python runtime loads (its codec from another folder, as --higgs_dir gives it)
    and, on the same ONNX Runtime kernels, says what inference.py says for a seed (Python's fused attention kernel,
    which Node has not, set aside)."""
    from codes.runtime.contract.native_kernels import KEEP, SWITCH

    build = builds.get("web", "--include-higgs") if profile == "web" else builds.get(profile)
    codec = ["--higgs_dir", build if profile == "web" else builds.get("cpu_fp32", "--higgs-only")]
    args = ("--text", "Every profile, one voice.", "--language", "en", "--num_steps", "8", "--seed", "11", *codec)
    python_codes = tmp_path / "python.npy"
    result = run_script("inference.py", "--model_dir", build, "--output", tmp_path / "python.wav",
                        "--codes_out", python_codes, *args, env={SWITCH: KEEP})
    assert result.returncode == 0, result.stderr
    assert (node_codes(build, tmp_path, "node", *args) == np.load(python_codes)).all()


def test_a_build_too_large_for_wasm_memory_is_one_line_naming_the_web_profile(build, tmp_path):
    """WebAssembly addresses 4 GiB: a build whose graphs the manifest records past 3 GiB is refused before any
    graph is read (here a copy of the manifest alone, its graphs' sizes as a full-size fp32 build's would be)."""
    import json

    manifest = json.loads((build / "omnivoice_manifest.json").read_text(encoding="utf-8"))
    for entry in manifest["backbone"].values():
        entry["size_bytes"] = 1_300_000_000
    folder = tmp_path / "large"
    folder.mkdir()
    (folder / "omnivoice_manifest.json").write_text(json.dumps(manifest), encoding="utf-8")
    out = tmp_path / "out.wav"
    result = node_cli("--model_dir", folder, "--backend", "wasm", "--text", "Hello.", "--output", out)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "3.6 GiB" in lines[0] and "optimize.py --device web" in lines[0]
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["large"]


STREAM_SCRIPT = """
import { OmniVoice } from "./web/src/index.mjs";
const [build, text] = process.argv.slice(1);
const tts = await OmniVoice.load(build, { threads: 1 });
const pieces = [];
for await (const piece of tts.stream({ text, language: "en", numSteps: 8, seed: 5 })) {
  pieces.push({ text: piece.text, codes: Array.from(piece.codes.data, Number), frames: piece.codes.dims[1],
                samples: piece.audio.length, final: piece.final });
}
console.log(JSON.stringify(pieces));
"""


def test_a_stream_speaks_each_piece_as_python_speaks_it_alone(build, tmp_path):
    """tts.stream cuts the text as the server's stream does (stream_chunks) and piece i of a seeded request is that
    piece spoken alone with seed + i: the same codes and the same length of audio as the Python runtime's."""
    import json

    from codes.runtime.synthesis import OmniVoiceOnnx
    from codes.runtime.text.chunks import stream_chunks

    text = "First of all, a short clause. Then a longer sentence follows it, and one more after that."
    result = subprocess.run(["node", "--input-type=module", "-e", STREAM_SCRIPT, str(build), text], cwd=ROOT,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    pieces = json.loads(result.stdout.strip().splitlines()[-1])
    chunks = stream_chunks(text)
    assert len(chunks) > 1 and [p["text"] for p in pieces] == chunks
    assert [p["final"] for p in pieces] == [False] * (len(chunks) - 1) + [True]
    tts = OmniVoiceOnnx(build, threads=1)
    for i, (piece, chunk) in enumerate(zip(pieces, chunks)):
        audio, codes = tts.generate(chunk, language="en", num_steps=8, seed=5 + i, return_codes=True)
        assert piece["codes"] == codes.ravel().tolist() and piece["samples"] == len(audio)
