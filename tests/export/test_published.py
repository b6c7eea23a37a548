"""Folders in the recipe's layout and manifest schema: every build speaks it, and the scripts run one.

The published folder is assembled from our fp32 build: the same graphs under the recipe's
names, the codec under higgs/models/, and a manifest holding only the recipe's keys.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import soundfile

from codes.export.generated_higgs import speech_like_signal
from codes.runtime.contract.manifest import MANIFEST_NAME, read_manifest
from helpers.scripts import last_error_line, run_main, run_script
from helpers.synthesis_inputs import FP32_BUILD

RECIPE_KEYS = ("model_id", "execution_provider", "precision", "backbone", "higgs_tokenizer", "iterative_decoding")
GRAPH_KEYS = ("filename", "inputs", "outputs")  # what the recipe's graph entries hold
CODEC_DIR = "higgs/models"
TEXT = "The recipe's folder speaks too."


def publish(build, folder):
    """Our build laid out as the recipe publishes it: its names, no hashes, none of our keys."""
    data = read_manifest(build).data
    folder.mkdir()
    for entry in data["backbone"].values():
        for name in (entry["filename"], *entry["external_data"]):
            shutil.copy(build / name, folder / name)
    for name in data["tokenizer"]["files"]:
        shutil.copy(build / name, folder / name)
    codec = build / data["higgs_tokenizer"]["models_dir"]
    (folder / CODEC_DIR).mkdir(parents=True)
    for path in codec.iterdir():
        if path.name != MANIFEST_NAME:
            shutil.copy(path, folder / CODEC_DIR / path.name)
    recipe = {key: data[key] for key in RECIPE_KEYS}
    recipe["backbone"] = {key: {k: entry[k] for k in GRAPH_KEYS} for key, entry in data["backbone"].items()}
    recipe["higgs_tokenizer"] = {"models_dir": CODEC_DIR, "sub_models": {
        key: {k: entry[k] for k in GRAPH_KEYS} for key, entry in data["higgs_tokenizer"]["sub_models"].items()}}
    (folder / MANIFEST_NAME).write_text(json.dumps(recipe, indent=2))
    return folder


@pytest.fixture(scope="module")
def ours(builds):
    return builds.get(*FP32_BUILD)


@pytest.fixture(scope="module")
def published(ours, tmp_path_factory):
    return publish(ours, tmp_path_factory.mktemp("published") / "OmniVoice-Onnx")


@pytest.fixture(scope="module")
def causal_published(published, tiny_checkpoint, tmp_path_factory):
    """The same folder with the genai builder's own (causal) graph as its llm_decoder.onnx."""
    from codes.export.checkpoint import load_omnivoice
    from codes.export.llm_genai import build_genai_causal, write_standalone_llm

    root = tmp_path_factory.mktemp("causal")
    folder = root / "OmniVoice-Onnx"
    shutil.copytree(published, folder)
    genai = build_genai_causal(write_standalone_llm(load_omnivoice(tiny_checkpoint.path), root / "hf"),
                               root / "genai", "fp32", "cpu")
    (folder / "llm_decoder.onnx").unlink()
    (folder / "llm_decoder.onnx.data").unlink()
    shutil.copy(genai, folder / "llm_decoder.onnx")
    shutil.copy(genai.with_name("model.onnx.data"), folder / "model.onnx.data")
    return folder


def speak(model_dir, out, *extra):
    return run_script("inference.py", "--model_dir", model_dir, "--text", TEXT, "--seed", "5", "--num_steps", "8",
                      "--quiet", "--output", out / "out.wav", "--codes_out", out / "codes.npy", *extra)


def test_a_fresh_build_speaks_the_recipes_schema_and_still_verifies(ours):
    data = read_manifest(ours).data  # our validation and every hash
    assert all(isinstance(data[key], str) for key in ("model_id", "execution_provider", "precision"))
    assert data["precision"] == "fp32" and data["execution_provider"] == "CPUExecutionProvider"
    assert set(data["backbone"]) == {"audio_embeddings_encoder", "llm_decoder", "audio_heads_decoder"}
    for entry in data["backbone"].values():
        assert isinstance(entry["filename"], str) and (ours / entry["filename"]).is_file()
        assert all(isinstance(t["name"], str) for t in entry["inputs"] + entry["outputs"])
    codec = data["higgs_tokenizer"]
    assert isinstance(codec["models_dir"], str) and len(codec["sub_models"]) == 4
    assert all((ours / codec["models_dir"] / e["filename"]).is_file() for e in codec["sub_models"].values())
    decoding = data["iterative_decoding"]
    assert decoding["steps"] == 32 and decoding["audio_codebook_weights"] == [8, 8, 6, 6, 4, 4, 2, 2]
    assert decoding["per_step_pipeline"] == ["audio_embeddings_encoder", "llm_decoder", "audio_heads_decoder", "cell_scoring"]
    # What the recipe cannot say sits beside it, under our own keys.
    assert data["attention"] == "bidirectional" and data["files"] and data["decoding_defaults"]["num_steps"] == 32
    assert data["graph_precision"] == {"llm": "fp32", "embeddings": "fp32", "heads": "fp32"}


def test_a_published_folder_synthesizes_exactly_our_codes(ours, published, tmp_path):
    for name, folder in (("ours", ours), ("published", published)):
        (tmp_path / name).mkdir()
        result = speak(folder, tmp_path / name)
        assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "published/codes.npy"), np.load(tmp_path / "ours/codes.npy"))


def test_a_published_folder_passes_equivalence_and_round_trips_audio(ours, published, tmp_path):
    result = run_main("eval.py", "--mode", "equiv", "--model_dir", published)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "llm_decoder hidden" in result.stdout and "bidirectional:" in result.stdout and "encode" in result.stdout
    soundfile.write(tmp_path / "in.wav", speech_like_signal(1.5, seed=3), 24000)
    for name, folder in (("ours", ours), ("published", published)):
        result = run_script("higgs_inference.py", "--models-dir", folder, "--input", tmp_path / "in.wav",
                            "--codes_out", tmp_path / f"{name}.npy")
        assert result.returncode == 0, result.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "published.npy"), np.load(tmp_path / "ours.npy"))


def test_the_causal_genai_backbone_is_refused_until_a_bidirectional_one_is_passed(ours, causal_published, tmp_path):
    result = speak(causal_published, tmp_path)
    assert result.returncode == 2
    line = last_error_line(result)
    assert result.stderr.strip().splitlines() == [line]
    assert "causal" in line and "optimize.py" in line and "--backbone FILE" in line
    assert list(tmp_path.iterdir()) == []  # nothing written
    refused = run_main("eval.py", "--mode", "equiv", "--model_dir", causal_published)
    assert refused.returncode == 2 and "causal" in last_error_line(refused)

    result = speak(causal_published, tmp_path, "--backbone", ours / "llm_decoder.onnx")
    assert result.returncode == 0, result.stderr
    (tmp_path / "ours").mkdir()
    assert speak(ours, tmp_path / "ours").returncode == 0
    np.testing.assert_array_equal(np.load(tmp_path / "codes.npy"), np.load(tmp_path / "ours/codes.npy"))
    checked = run_main("eval.py", "--mode", "equiv", "--model_dir", causal_published,
                       "--backbone", ours / "llm_decoder.onnx")
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_backbone_flag_probes_the_graph_it_is_given(ours, causal_published, tmp_path):
    """--backbone on our own build is checked the same way: the causal graph is refused in one line."""
    result = speak(ours, tmp_path, "--backbone", causal_published / "llm_decoder.onnx")
    assert result.returncode == 2 and "causal" in last_error_line(result) and list(tmp_path.iterdir()) == []
    missing = speak(ours, tmp_path, "--backbone", tmp_path / "nope.onnx")
    assert missing.returncode == 2 and "does not exist" in last_error_line(missing)
