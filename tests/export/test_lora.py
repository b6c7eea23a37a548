"""optimize.py --lora: a fine-tuned adapter merged before export gives the codes of upstream's model with the
adapter merged (PEFT's merge_and_unload, as omnivoice-merge-lora does), token for token; a merged checkpoint
folder builds like any other; an adapter that does not fit is refused in one line before anything is written."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from helpers.lora import write_adapter
from helpers.scripts import run_main

from codes.runtime.contract.manifest import read_manifest
from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.model.decoding import RandomNoise
from codes.runtime.synthesis import OmniVoiceOnnx

TEXTS = ["A fine-tuned voice says this.", "Und dieser Satz ist deutsch."]
LANGUAGES = ["en", "de"]
STEPS = 8


@pytest.fixture(scope="module")
def adapter(tiny_checkpoint, tmp_path_factory):
    return write_adapter(tiny_checkpoint.path, tmp_path_factory.mktemp("lora") / "checkpoint-500")


@pytest.fixture(scope="module")
def merged_upstream(tiny_checkpoint, adapter):
    from omnivoice.models.omnivoice import OmniVoice
    from peft import PeftModel

    # Loaded for inference (tokenizer, duration estimator), then merged as omnivoice-merge-lora merges.
    base = OmniVoice.from_pretrained(str(tiny_checkpoint.path), attn_implementation="sdpa", dtype=torch.float32)
    return PeftModel.from_pretrained(base, str(adapter)).merge_and_unload().eval()


def upstream_codes(model):
    from omnivoice.models.omnivoice import OmniVoiceGenerationConfig

    config = OmniVoiceGenerationConfig(num_step=STEPS, position_temperature=0.0, class_temperature=0.0)
    with torch.inference_mode():
        task = model._preprocess_all(text=TEXTS, language=LANGUAGES, instruct=[None, None])
        return [c.numpy() for c in model._generate_iterative(task, config)]


def our_codes(folder):
    tts = OmniVoiceOnnx(folder, threads=1)
    requests = tts.settle(TEXTS, LANGUAGES)
    settings = GenerationSettings(num_steps=STEPS, position_temperature=0.0, class_temperature=0.0)
    return [chunks[0] for chunks in tts.generate_codes(requests, settings, RandomNoise(0))]


@pytest.fixture(scope="module")
def lora_build(tiny_checkpoint, adapter, tmp_path_factory):
    out = tmp_path_factory.mktemp("lora-build") / "build"
    result = run_main("optimize.py", "--model", tiny_checkpoint.path, "--lora", adapter, "--device", "cpu_fp32",
                      "--output", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "merged the LoRA adapter" in result.stdout
    return out


def test_the_adapter_build_gives_upstream_merged_codes_token_for_token(lora_build, merged_upstream, builds,
                                                                       tiny_checkpoint):
    ours = our_codes(lora_build)
    expected = upstream_codes(merged_upstream)
    for mine, theirs in zip(ours, expected):
        np.testing.assert_array_equal(mine, theirs)
    base = our_codes(builds.get("cpu_fp32"))
    assert any(not np.array_equal(a, b) for a, b in zip(ours, base)), "the adapter changed nothing"
    lora = read_manifest(lora_build).data["source"]["lora"]
    assert lora["rank"] == 4 and lora["tokenizer"] == "base's" and len(lora["adapter_sha256"]) == 64


def test_a_merged_checkpoint_folder_builds_like_any_other(lora_build, merged_upstream, tiny_checkpoint, tmp_path):
    folder = tmp_path / "merged"
    merged_upstream.save_pretrained(str(folder))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy2(tiny_checkpoint.path / name, folder / name)
    shutil.copytree(tiny_checkpoint.path / "audio_tokenizer", folder / "audio_tokenizer")
    result = run_main("optimize.py", "--model", folder, "--device", "cpu_fp32", "--output", tmp_path / "build")
    assert result.returncode == 0, result.stdout + result.stderr
    for mine, theirs in zip(our_codes(tmp_path / "build"), our_codes(lora_build)):
        np.testing.assert_array_equal(mine, theirs)


def test_the_adapter_s_own_tokenizer_is_used(tiny_checkpoint, adapter, tmp_path):
    own = tmp_path / "adapter-with-tokenizer"
    shutil.copytree(adapter, own)
    tokenizer = json.loads((tiny_checkpoint.path / "tokenizer.json").read_text())
    tokenizer["added_tokens"].append({**tokenizer["added_tokens"][-1], "id": tokenizer["added_tokens"][-1]["id"] + 1,
                                      "content": "<|fine_tuned|>"})
    (own / "tokenizer.json").write_text(json.dumps(tokenizer))
    shutil.copy2(tiny_checkpoint.path / "tokenizer_config.json", own / "tokenizer_config.json")
    result = run_main("optimize.py", "--model", tiny_checkpoint.path, "--lora", own, "--device", "cpu_fp32",
                      "--output", tmp_path / "build")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "<|fine_tuned|>" in (tmp_path / "build" / "tokenizer.json").read_text()
    assert read_manifest(tmp_path / "build").data["source"]["lora"]["tokenizer"] == "adapter's"


def _reshaped_adapter(adapter, folder):
    """The adapter with one LoRA matrix for a wider layer than the checkpoint has."""
    from safetensors.numpy import load_file, save_file

    shutil.copytree(adapter, folder)
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    key = next(k for k in tensors if k.endswith("q_proj.lora_A.weight"))
    tensors[key] = np.zeros((tensors[key].shape[0], 2 * tensors[key].shape[1]), tensors[key].dtype)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    return key


@pytest.mark.parametrize("damage", ["no-weights", "no-config", "other-shape", "not-a-folder", "lora-and-codec-only"])
def test_an_adapter_that_does_not_fit_is_refused_before_anything_is_written(tiny_checkpoint, adapter, tmp_path,
                                                                            damage):
    bad, extra, expected = tmp_path / "bad", [], None
    if damage == "no-weights":
        shutil.copytree(adapter, bad)
        (bad / "adapter_model.safetensors").unlink()
        expected = "missing adapter_model.safetensors"
    elif damage == "no-config":
        shutil.copytree(adapter, bad)
        (bad / "adapter_config.json").unlink()
        expected = "missing adapter_config.json"
    elif damage == "other-shape":
        expected = _reshaped_adapter(adapter, bad)
    elif damage == "not-a-folder":
        expected = "no such folder"
    else:
        bad, extra, expected = adapter, ["--higgs-only"], "--higgs-only"
    out = tmp_path / "out"
    result = run_main("optimize.py", "--model", tiny_checkpoint.path, "--lora", bad, "--device", "cpu_fp32",
                      "--output", out, *extra)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], result.stderr
    assert not out.exists() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]
