"""Upstream's Python API (codes/runtime/api.py): upstream's own README examples, with the import and the model path
changed, give upstream's audio item for item, in a venv without torch; and the API's names, defaults and
refusals."""

from __future__ import annotations

import dataclasses
import logging
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
import torch
from helpers.synthesis_inputs import ASR_BUILD, ASR_ONLY, FP32_BUILD, reference_clip, write_clip
from helpers.venvs import runtime_venv

import omnivoice.models.omnivoice as upstream_module
from codes import OmniVoice, OmniVoiceGenerationConfig, VoiceClonePrompt
from codes.common.errors import UserError

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "tests" / "examples" / "upstream_readme.py"
UPSTREAM_IMPORT = "from omnivoice import OmniVoice, OmniVoiceGenerationConfig, VoiceClonePrompt  # the import"
OUR_IMPORT = "from codes import OmniVoice, OmniVoiceGenerationConfig, VoiceClonePrompt  # the import"
AUDIO_ATOL = 2e-4  # the fp32 codec against torch's (tests/runtime/test_synthesis.py)


@pytest.fixture(scope="module")
def build(builds):
    return builds.get(*FP32_BUILD)


@pytest.fixture(scope="module")
def model(build):
    return OmniVoice.from_pretrained(str(build), device_map="cpu", threads=1)


@pytest.fixture(scope="module")
def ref_wav(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("clip") / "ref.wav", reference_clip(), 24000)


def _run_examples(python: Path, script: Path, model_path: Path, ref_wav: Path, folder: Path) -> dict:
    folder.mkdir()
    out = folder / "audio.npz"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([str(python), str(script), str(model_path), str(out), str(ref_wav), str(folder)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    with np.load(out) as arrays:
        return {name: arrays[name] for name in arrays.files}


def test_upstreams_readme_examples_give_upstreams_audio_with_two_lines_changed(tiny_checkpoint, build, ref_wav,
                                                                            tmp_path):
    source = EXAMPLES.read_text(encoding="utf-8")
    assert source.count(UPSTREAM_IMPORT) == 1
    ours = tmp_path / "ours.py"
    ours.write_text(source.replace(UPSTREAM_IMPORT, OUR_IMPORT), encoding="utf-8")

    upstream_audio = _run_examples(Path(sys.executable), EXAMPLES, tiny_checkpoint.path, ref_wav, tmp_path / "up")
    python = runtime_venv() / "bin" / "python"
    no_torch = subprocess.run([str(python), "-c", "import importlib.util as u; print(u.find_spec('torch'))"],
                              capture_output=True, text=True, check=True)
    assert no_torch.stdout.strip() == "None"
    our_audio = _run_examples(python, ours, build, ref_wav, tmp_path / "ours")

    assert sorted(our_audio) == sorted(upstream_audio)
    assert len(our_audio) >= 20  # every example, each batch item on its own
    for name, expected in upstream_audio.items():
        got = our_audio[name]
        assert got.shape == expected.shape, name
        if expected.dtype.kind in "iU":
            assert np.array_equal(got, expected), name
        else:
            np.testing.assert_allclose(got, expected, atol=AUDIO_ATOL, rtol=0, err_msg=name)
    # Different voices, languages and lengths in one batch make different audio.
    assert len({our_audio[f"batch_voices.{i}"].shape for i in range(3)}) == 3


def test_generation_config_has_upstreams_fields_and_defaults():
    ours = {f.name: f.default for f in dataclasses.fields(OmniVoiceGenerationConfig)}
    theirs = {f.name: f.default for f in dataclasses.fields(upstream_module.OmniVoiceGenerationConfig)}
    assert ours == theirs
    config = OmniVoiceGenerationConfig.from_dict({"num_step": 12, "not_a_field": 1})
    assert config.num_step == 12 and config.settings().num_steps == 12
    with pytest.raises(UserError, match="guidance_scale"):
        OmniVoiceGenerationConfig(guidance_scale=float("nan")).settings()


def test_generate_always_returns_a_list_and_takes_a_torch_clip(model, ref_wav):
    single = model.generate(text="One.", num_step=2, position_temperature=0.0)
    assert isinstance(single, list) and len(single) == 1 and single[0].dtype == np.float32 and single[0].ndim == 1
    waveform, rate = soundfile.read(ref_wav, dtype="float32")
    from_numpy = model.create_voice_clone_prompt((waveform, rate), ref_text="What it says.")
    from_torch = model.create_voice_clone_prompt((torch.from_numpy(waveform)[None], rate), ref_text="What it says.")
    assert np.array_equal(from_numpy.ref_audio_tokens, from_torch.ref_audio_tokens)
    assert from_numpy.ref_text == "What it says."


def test_a_batch_may_mix_voices_and_no_voice(model, ref_wav):
    prompt = model.create_voice_clone_prompt(str(ref_wav), ref_text="What it says.")
    kwargs = dict(num_step=4, position_temperature=0.0, postprocess_output=False)
    mixed = model.generate(text=["Cloned.", "Not cloned."], voice_clone_prompt=[prompt, None], **kwargs)
    alone = [model.generate(text="Cloned.", voice_clone_prompt=prompt, **kwargs)[0],
             model.generate(text="Not cloned.", **kwargs)[0]]
    for got, expected in zip(mixed, alone):
        np.testing.assert_allclose(got, expected, atol=1e-5)


def test_a_prompt_saved_here_loads_in_upstream(model, ref_wav, tmp_path):
    prompt = model.create_voice_clone_prompt(str(ref_wav), ref_text="What it says")
    prompt.save(tmp_path / "voice.pt")
    theirs = upstream_module.VoiceClonePrompt.load(str(tmp_path / "voice.pt"))
    assert np.array_equal(theirs.ref_audio_tokens.numpy(), prompt.ref_audio_tokens)
    assert theirs.ref_text == "What it says." and theirs.ref_rms == pytest.approx(prompt.ref_rms)
    again = VoiceClonePrompt.load(tmp_path / "voice.pt")
    assert np.array_equal(again.ref_audio_tokens, prompt.ref_audio_tokens)


@pytest.mark.parametrize("kwargs, message", [
    (dict(device_map="mps"), "device_map 'mps' is not one this runtime can run on"),
    (dict(device_map="cuda:1"), "CUDA_VISIBLE_DEVICES"),
    (dict(dtype=torch.float16), "dtype float16 asks for a fp16 backbone, but .* holds a fp32 one"),
    (dict(load_asr=True), "has no recogniser to load: build one with `python optimize.py --include-asr`"),
])
def test_from_pretrained_refuses_what_the_build_cannot_do_in_one_line(build, kwargs, message):
    with pytest.raises(UserError, match=message) as refused:
        OmniVoice.from_pretrained(str(build), **kwargs)
    assert "\n" not in str(refused.value)


def test_from_pretrained_accepts_upstreams_loading_arguments(build, caplog):
    with caplog.at_level(logging.WARNING, logger="codes.runtime.api"):
        model = OmniVoice.from_pretrained(build, device_map="auto", dtype=torch.float32, attn_implementation="sdpa",
                                          low_cpu_mem_usage=True, no_such_argument=1)
    assert model.sampling_rate == 24000 and model.engine.provider == "cpu"
    assert [r.getMessage() for r in caplog.records] == ["from_pretrained: ignored argument(s) no_such_argument"]


def test_an_upstream_checkpoint_is_refused_with_the_build_command(tiny_checkpoint):
    with pytest.raises(UserError, match="is an upstream checkpoint; build it first with python optimize.py"):
        OmniVoice.from_pretrained(tiny_checkpoint.path)


# --- a clip without its transcript --------------------------------------------------------------


@pytest.fixture(scope="module")
def whisper_folder():
    from codes.export.whisper_checkpoint import generated_whisper

    return generated_whisper("tiny-whisper")


def test_generate_without_ref_text_transcribes_as_upstream(builds, tiny_checkpoint, whisper_folder, ref_wav):
    """Upstream's from_pretrained(asr_model_name=..., load_asr=True) and generate(ref_audio=..., ref_text=None),
    on a build whose recogniser is that Whisper: the same audio."""
    settings = dict(num_step=8, position_temperature=0.0, class_temperature=0.0)
    ours = OmniVoice.from_pretrained(builds.get(*ASR_BUILD), device_map="cpu", threads=1,
                                     asr_model_name="tiny-whisper", load_asr=True)
    theirs = upstream_module.OmniVoice.from_pretrained(str(tiny_checkpoint.path), attn_implementation="sdpa",
                                                       asr_model_name=str(whisper_folder), load_asr=True)
    expected = theirs.generate(text="Cloned from a clip alone.", ref_audio=str(ref_wav), ref_text=None, **settings)[0]
    got = ours.generate(text="Cloned from a clip alone.", ref_audio=str(ref_wav), ref_text=None, **settings)[0]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, atol=AUDIO_ATOL, rtol=0)
    waveform, rate = soundfile.read(ref_wav, dtype="float32")
    assert ours.transcribe((waveform, rate)) == theirs.transcribe((torch.from_numpy(waveform), rate))
    assert ours.create_voice_clone_prompt(str(ref_wav)).ref_text == theirs.create_voice_clone_prompt(str(ref_wav)).ref_text


def test_asr_arguments_are_honoured_or_refused_in_one_line(builds, whisper_folder, ref_wav):
    asr_build = builds.get(*ASR_BUILD)
    OmniVoice.from_pretrained(asr_build, asr_model_name=str(whisper_folder))  # its folder names it too
    with pytest.raises(UserError, match="asr_model_name 'openai/whisper-large-v3-turbo': the recogniser in .* was "
                                        "built from 'tiny-whisper'") as refused:
        OmniVoice.from_pretrained(asr_build, asr_model_name="openai/whisper-large-v3-turbo")
    assert "\n" not in str(refused.value)
    # The recogniser of another build (asr_dir) serves a build without one.
    plain = OmniVoice.from_pretrained(builds.get(*FP32_BUILD), threads=1)
    with pytest.raises(UserError, match="has none: .*--include-asr"):
        plain.create_voice_clone_prompt(str(ref_wav))
    borrowed = OmniVoice.from_pretrained(builds.get(*FP32_BUILD), threads=1, asr_dir=builds.get(*ASR_ONLY),
                                         load_asr=True)
    own = OmniVoice.from_pretrained(asr_build, threads=1)
    assert borrowed.create_voice_clone_prompt(str(ref_wav)).ref_text == own.create_voice_clone_prompt(str(ref_wav)).ref_text
