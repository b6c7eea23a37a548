"""The codec's Snake on our kernel (codes/runtime/native/snake.c) against the exported graph's own ops, and the
graphs it is swapped into (codes/runtime/contract/fused_snake.py)."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from codes.common.isa import native_kernel_lanes
from codes.runtime.contract import fused_snake
from codes.runtime.contract.native_kernels import LIBRARY

RUNS_HERE = native_kernel_lanes() > 0


def _snake_graph(channels: int, dtype=np.float32):
    """One Snake as the Higgs export writes it: Mul(alpha, x), Sin, Pow 2, Mul by 1/(alpha + eps), Add x."""
    rng = np.random.default_rng(channels)
    alpha = (np.abs(rng.standard_normal((1, channels, 1))) * 3 + 0.1).astype(dtype)
    inits = [numpy_helper.from_array(alpha, "alpha"), numpy_helper.from_array(alpha + dtype(1e-9), "alpha_eps"),
             numpy_helper.from_array(np.array(2.0, dtype), "two")]
    nodes = [helper.make_node("Reciprocal", ["alpha_eps"], ["inverse"]),
             helper.make_node("Mul", ["alpha", "x"], ["scaled"]),
             helper.make_node("Sin", ["scaled"], ["sine"]),
             helper.make_node("Pow", ["sine", "two"], ["squared"]),
             helper.make_node("Mul", ["inverse", "squared"], ["weighed"]),
             helper.make_node("Add", ["x", "weighed"], ["y"])]
    kind = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    graph = helper.make_graph(nodes, "snake", [helper.make_tensor_value_info("x", kind, [1, "C", "L"])],
                              [helper.make_tensor_value_info("y", kind, None)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.mark.parametrize("channels,samples", [(64, 24000), (1024, 37)])  # a long signal, and a tail of lanes
def test_snake_computes_what_the_exported_ops_compute(channels, samples, kernel_lanes):
    """x + sin(alpha x)^2 / alpha to about 1e-7 of the output's scale (7.6e-6 at outputs near 120, measured), at
    arguments up to a few hundred radians."""
    model = _snake_graph(channels)
    x = (np.random.default_rng(samples).standard_normal((1, channels, samples)) * 30).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert fused_snake.rewrite(model) == 1
    assert [n.op_type for n in model.graph.node] == ["Reciprocal", "Snake"]
    options = ort.SessionOptions()
    if kernel_lanes == 0:
        with pytest.raises(Exception, match="need AVX2 and FMA"):
            options.register_custom_ops_library(str(LIBRARY))
        return
    options.register_custom_ops_library(str(LIBRARY))
    got = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert got.shape == expected.shape
    error = np.abs(got - expected).max()
    assert error <= 1e-6 * np.abs(expected).max(), error


def test_an_fp16_codec_and_other_graphs_keep_their_ops():
    model = _snake_graph(8, np.float16)
    before = model.SerializeToString()
    assert fused_snake.rewrite(model) == 0 and model.SerializeToString() == before
    model = _snake_graph(8)
    model.graph.node[3].input[1] = "alpha"  # a Pow by something that is not 2: not Snake's maths
    before = model.SerializeToString()
    assert fused_snake.rewrite(model) == 0 and model.SerializeToString() == before


def test_an_input_the_kernel_does_not_take_gives_nan(kernel_lanes):
    """alpha of the wrong channel count: NaN, never a read past alpha."""
    model = _snake_graph(8)
    fused_snake.rewrite(model)
    if kernel_lanes == 0:
        return
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(LIBRARY))
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    got = session.run(None, {"x": np.ones((1, 9, 40), np.float32)})[0]  # nine channels against alpha's eight
    assert got.shape == (1, 9, 40) and np.isnan(got).all()


def test_the_build_s_codec_decodes_on_our_snake_where_the_cpu_has_it(served_build, monkeypatch, kernel_lanes):
    """The tiny build's fp32 Higgs decoder: every Snake swapped where this CPU runs our kernels, at each width,
    its audio within 1e-5 of the exported ops'."""
    from codes.runtime.contract.native_kernels import KEEP, SWITCH, kernels_label
    from codes.runtime.contract.specs import HIGGS_DECODER
    from codes.runtime.synthesis import OmniVoiceOnnx

    codes = np.random.default_rng(5).integers(0, 1024, (8, 30))
    ours = OmniVoiceOnnx(served_build, step="numpy").codec
    assert ours.session(HIGGS_DECODER.key).kernels == kernels_label(kernel_lanes)
    monkeypatch.setenv(SWITCH, KEEP)
    theirs = OmniVoiceOnnx(served_build, step="numpy").codec
    assert theirs.session(HIGGS_DECODER.key).kernels == "onnx"
    a, b = ours.decode(codes), theirs.decode(codes)
    assert a.shape == b.shape and np.abs(a - b).max() <= 1e-5 * max(np.abs(b).max(), 1e-3)


def test_an_fp16_decoder_is_widened_once_into_the_cache(tmp_path_factory, tmp_path, monkeypatch):
    """The profiles' fp16 decoder: widened to fp32 with our Snake, kept in the user's cache and found there on the
    next load (never made again), its audio within 1e-5 of ONNX Runtime's run of the fp16 graph, which computes
    in fp32 as well."""
    from helpers.codec_builds import codec_build

    from codes.runtime.audio.codec import HiggsCodec
    from codes.runtime.contract import kernel_graphs, native_kernels
    from codes.runtime.contract.specs import HIGGS_DECODER

    folder, section = codec_build(tmp_path_factory, "fp16")
    monkeypatch.setenv("OMNIVOICE_ONNX_CACHE", str(tmp_path))
    monkeypatch.delenv(native_kernels.SWITCH, raising=False)
    codes = np.random.default_rng(6).integers(0, 1024, (8, 30))
    ours = HiggsCodec(folder / section["models_dir"], section)
    assert ours.session(HIGGS_DECODER.key).kernels == native_kernels.kernels_label(native_kernel_lanes())
    if not RUNS_HERE:
        return
    widened = list((tmp_path / kernel_graphs.WIDENED).iterdir())
    assert len(widened) == 1 and widened[0].suffix == ".onnx"
    made = widened[0].stat().st_mtime_ns
    decoder = folder / section["models_dir"] / section["sub_models"][HIGGS_DECODER.key]["filename"]
    assert kernel_graphs.codec_graph(decoder) == widened[0] and widened[0].stat().st_mtime_ns == made
    monkeypatch.setenv(native_kernels.SWITCH, native_kernels.KEEP)
    theirs = HiggsCodec(folder / section["models_dir"], section)
    a, b = ours.decode(codes), theirs.decode(codes)
    assert a.shape == b.shape and np.abs(a - b).max() <= 1e-5 * max(np.abs(b).max(), 1e-3)
