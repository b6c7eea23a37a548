"""Voices that travel between upstream and inference.py, exactly: a prompt upstream saved speaks here with
upstream's codes, and one inference.py saves as .pt loads in upstream with identical tokens, text and RMS.

Deterministic settings (position and class temperature 0) on the cpu_fp32 build with its fp32 codec,
against upstream OmniVoice on the same tiny checkpoint, as test_synthesis.py does.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.scripts import last_error_line, run_main
from helpers.synthesis_inputs import FP32_BUILD, REF_TEXT, reference_clip, write_clip
from helpers.upstream_twins import recorded_codes, tiny_upstream

from omnivoice.models.omnivoice import VoiceClonePrompt

TEXT = "Nice to hear it cloned."
DETERMINISTIC = ("--num_steps", "8", "--position_temperature", "0", "--class_temperature", "0")
UPSTREAM_DETERMINISTIC = dict(num_step=8, position_temperature=0.0, class_temperature=0.0)


@pytest.fixture(scope="module")
def upstream(tiny_checkpoint):
    with tiny_upstream(tiny_checkpoint.path) as model:
        yield model


@pytest.fixture(scope="module")
def model_dir(builds):
    return builds.get(*FP32_BUILD)


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    folder = tmp_path_factory.mktemp("clip")
    return write_clip(folder / "ref.wav", reference_clip(24000, seed=0, peak=0.08), 24000)


def speak(model_dir, tmp_path, *args) -> np.ndarray:
    """inference.py's codes for TEXT under deterministic settings."""
    codes = tmp_path / "codes.npy"
    codes.unlink(missing_ok=True)
    run_main("inference.py", "--model_dir", model_dir, "--text", TEXT, "--language", "en", *DETERMINISTIC,
             "--threads", "1", "--quiet", "--codes_out", codes, "--output", tmp_path / "out.wav", *args, check=True)
    return np.load(codes)


def upstream_speaks(upstream, prompt: VoiceClonePrompt) -> np.ndarray:
    with recorded_codes(upstream) as calls, torch.inference_mode():
        upstream.generate(TEXT, language="en", voice_clone_prompt=prompt, **UPSTREAM_DETERMINISTIC)
    assert len(calls) == 1 and len(calls[0]) == 1
    return calls[0][0]


def test_a_prompt_saved_by_upstream_speaks_through_inference_py_with_upstreams_codes(upstream, model_dir, clip,
                                                                                      tmp_path):
    with torch.inference_mode():
        upstream.create_voice_clone_prompt(str(clip), REF_TEXT).save(str(tmp_path / "upstream.pt"))
    expected = upstream_speaks(upstream, VoiceClonePrompt.load(str(tmp_path / "upstream.pt")))
    ours = speak(model_dir, tmp_path, "--voice", tmp_path / "upstream.pt")
    assert ours.dtype == np.int64 and ours.shape == expected.shape
    assert np.array_equal(ours, expected)


def test_a_voice_saved_as_pt_loads_in_upstream_identically_and_speaks_the_same_codes(upstream, model_dir, clip,
                                                                                     tmp_path):
    ours = speak(model_dir, tmp_path, "--ref_audio", clip, "--ref_text", REF_TEXT, "--save_voice", tmp_path / "me.pt")
    mine = VoiceClonePrompt.load(str(tmp_path / "me.pt"))
    with torch.inference_mode():
        theirs = upstream.create_voice_clone_prompt(str(clip), REF_TEXT)
    assert mine.ref_audio_tokens.dtype == torch.int64
    assert torch.equal(mine.ref_audio_tokens, theirs.ref_audio_tokens)
    assert mine.ref_text == theirs.ref_text and mine.ref_rms == theirs.ref_rms
    assert np.array_equal(upstream_speaks(upstream, mine), ours)
    # --voice with --save_voice converts: our .npz to upstream's .pt and back, nothing lost
    speak(model_dir, tmp_path, "--voice", tmp_path / "me.pt", "--save_voice", tmp_path / "me.npz")
    speak(model_dir, tmp_path, "--voice", tmp_path / "me.npz", "--save_voice", tmp_path / "again.pt")
    assert (tmp_path / "again.pt").read_bytes() == (tmp_path / "me.pt").read_bytes()


def test_save_voice_refuses_a_path_that_exists_before_any_compute(model_dir, clip, tmp_path):
    (tmp_path / "taken.pt").write_bytes(b"someone's file")
    result = run_main("inference.py", "--model_dir", model_dir, "--text", TEXT, "--ref_audio", clip, "--ref_text",
                      REF_TEXT, "--save_voice", tmp_path / "taken.pt", "--output", tmp_path / "out.wav")
    assert result.returncode == 2 and "exists" in last_error_line(result) and "taken.pt" in last_error_line(result)
    assert (tmp_path / "taken.pt").read_bytes() == b"someone's file" and not (tmp_path / "out.wav").exists()
    result = run_main("inference.py", "--model_dir", model_dir, "--text", TEXT, "--save_voice", tmp_path / "new.pt")
    assert result.returncode == 2 and "--ref_audio" in last_error_line(result)
