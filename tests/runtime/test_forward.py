"""A decoding step on the execution provider: the glue graphs join the model graphs exactly as the
host does, in every float layout a build has (the gpu profile's fp16 backbone included), and a
step falls back to the host where the glue does not fit.

test_synthesis.py holds the device step and the numpy reference to upstream's codes; here the
graph step in between is held to both.
"""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from helpers.synthesis_inputs import FP32_BUILD

from codes.checks.equiv import padded_cfg_batch
from codes.runtime.contract import specs
from codes.runtime.contract.manifest import read_manifest
from codes.runtime.model.forward import window_index
from codes.runtime.synthesis import OmniVoiceOnnx
from codes.runtime.voices.prompt import build_cfg_batch

TEXTS = ["Hello there, how are you today?", "A second one, rather longer, so that the batch needs padding."]


def test_window_index_points_at_each_target_and_repeats_the_last_cell_as_padding():
    items = [(np.zeros((8, n), np.int64), np.zeros(n, bool)) for n in (7, 12)]
    batch = build_cfg_batch(items, [3, 5])
    index = window_index(batch, [3, 5])
    assert index.shape == (2, 5, 1) and index.dtype == np.int64
    assert index[0, :, 0].tolist() == [4, 5, 6, 6, 6]  # cond length 7, target 3, two padding cells
    assert index[1, :, 0].tolist() == [7, 8, 9, 10, 11]


@pytest.mark.parametrize("profile", ["cpu_fp32", "gpu"])
def test_logits_joined_on_the_device_equal_those_joined_on_the_host(builds, profile):
    """The gpu build casts the embeddings to its fp16 backbone and its hidden states back in glue
    graphs; on the host numpy does the same casts. Both must give the same logits on every target cell."""
    tts = OmniVoiceOnnx(builds.get(profile), provider="cpu", threads=1, step="device")
    assert tts.step == "device"
    glue = read_manifest(builds.get(profile)).data["glue"]
    assert set(glue) == ({"target_windows", "backbone_input"} if profile == "gpu" else {"target_windows"})
    target_lens = [9, 6]
    batch = padded_cfg_batch(text_vocab=1000, cond_lens=(23, 15), target_lens=target_lens, seed=4)
    on_device = tts.forward.device_logits(batch.input_ids, batch, target_lens)
    assert isinstance(on_device, ort.OrtValue)
    on_device = on_device.numpy()
    on_host = tts.forward.host_logits(batch.input_ids, batch, target_lens)
    for row in range(4):
        cells = slice(0, target_lens[row % 2])
        np.testing.assert_array_equal(on_device[row, :, cells], on_host[row, :, cells])


def test_every_step_path_gives_the_same_codes(builds):
    """Sampled, batched, unequal lengths: device, graph and numpy steps agree code for code."""
    codes = {}
    for step in ("device", "graph", "numpy"):
        tts = OmniVoiceOnnx(builds.get(*FP32_BUILD), threads=1, step=step)
        assert tts.step == step
        _, codes[step] = tts.generate(TEXTS, seed=5, return_codes=True, num_steps=8, class_temperature=0.6)
    for step in ("device", "graph"):
        for ours, reference in zip(codes[step], codes["numpy"]):
            np.testing.assert_array_equal(ours, reference)


def test_a_backbone_the_glue_does_not_fit_runs_with_the_graphs_joined_on_the_host(builds):
    """The gpu build's fp16 backbone in an fp32 build: the fp32 glue cannot take its hidden states."""
    fp32, gpu = builds.get("cpu_fp32"), builds.get("gpu")
    tts = OmniVoiceOnnx(fp32, provider="cpu", threads=1, backbone=gpu / specs.BACKBONE.filename, step="device")
    assert tts.step == "graph" and not tts.forward.on_device
    (codes,), = tts.generate_codes(tts.settle(TEXTS[0]), tts.defaults.replace(num_steps=4))
    assert codes.shape[0] == specs.NUM_CODEBOOKS and (codes < specs.CODEBOOK_SIZE).all()


def test_each_provider_runs_its_measured_default_step(builds):
    """The CPU runs the numpy step (the fastest there, bench/step_results.md); CUDA keeps the step on the device."""
    assert OmniVoiceOnnx(builds.get("cpu_fp32"), threads=1).step == "numpy"
    if "CUDAExecutionProvider" in ort.get_available_providers():  # where a GPU exists
        assert OmniVoiceOnnx(builds.get("cpu_fp32"), provider="cuda").step == "device"


def test_an_unknown_step_is_refused(builds):
    from codes.common.errors import UserError

    with pytest.raises(UserError, match="step must be one of device, graph, numpy"):
        OmniVoiceOnnx(builds.get("cpu_fp32"), step="gpu")


def test_an_engine_is_freed_as_soon_as_it_is_dropped(builds):
    """A full-size engine's sessions hold gigabytes: no reference cycle may keep a dropped one alive
    until the garbage collector happens to run (two alive at batch 32 ran a 24 GB machine out of memory)."""
    import gc
    import weakref

    gc.disable()
    try:
        tts = OmniVoiceOnnx(builds.get(*FP32_BUILD), threads=1, step="device")
        tts.generate_codes(tts.settle(TEXTS[0]), tts.defaults.replace(num_steps=2))
        dropped = weakref.ref(tts)
        del tts
        assert dropped() is None
    finally:
        gc.enable()
