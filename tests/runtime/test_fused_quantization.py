"""The row quantizers on our kernels (codes/runtime/native/quantize_rows.c) against the build's own ONNX ops, and
the graphs they are swapped into (codes/runtime/contract/fused_quantization.py)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from codes.export.int8 import Int8Scheme, quantize_graph
from codes.runtime.contract import fused_quantization
from codes.runtime.contract.native_kernels import LIBRARY

OPSET = 21  # the blocked QuantizeLinear the build writes (codes/export/int8.py)


def _layer(hidden: int, inner: int, rng) -> onnx.ModelProto:
    """A backbone layer's shape in fp32, as the genai graph writes it: a norm before a GEMM, the skip norm after
    it, the MLP's SiLU gate, and a last skip norm whose output leaves the graph unquantized (the final norm)."""
    f = TensorProto.FLOAT

    def weight(name, rows, cols):
        return numpy_helper.from_array((rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(np.float32), name)

    def gamma(name, size):
        return numpy_helper.from_array((1 + 0.1 * rng.standard_normal(size)).astype(np.float32), name)

    ms = "com.microsoft"
    nodes = [
        helper.make_node("SimplifiedLayerNormalization", ["x", "g0"], ["n0"], epsilon=1e-6, axis=-1),
        helper.make_node("MatMul", ["n0", "w_o"], ["o"], name="/model/layers.0/attn/o_proj/MatMul"),
        helper.make_node("SkipSimplifiedLayerNormalization", ["x", "o", "g1"], ["n1", "", "", "sum1"], domain=ms,
                         epsilon=1e-6),
        helper.make_node("MatMul", ["n1", "w_gate"], ["gate"], name="/model/layers.0/mlp/gate_proj/MatMul"),
        helper.make_node("MatMul", ["n1", "w_up"], ["up"], name="/model/layers.0/mlp/up_proj/MatMul"),
        helper.make_node("Sigmoid", ["gate"], ["sig"]),
        helper.make_node("Mul", ["gate", "sig"], ["silu"]),
        helper.make_node("Mul", ["silu", "up"], ["m"]),
        helper.make_node("MatMul", ["m", "w_down"], ["d"], name="/model/layers.0/mlp/down_proj/MatMul"),
        helper.make_node("SkipSimplifiedLayerNormalization", ["sum1", "d", "g2"], ["y", "", "", "sum2"], domain=ms,
                         epsilon=1e-6),
    ]
    inits = [gamma("g0", hidden), gamma("g1", hidden), gamma("g2", hidden), weight("w_o", hidden, hidden),
             weight("w_gate", hidden, inner), weight("w_up", hidden, inner), weight("w_down", inner, hidden)]
    graph = helper.make_graph(nodes, "layer", [helper.make_tensor_value_info("x", f, ["B", "S", hidden])],
                              [helper.make_tensor_value_info("y", f, None), helper.make_tensor_value_info("sum2", f, None)],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET), helper.make_opsetid(ms, 1)],
                             ir_version=10)


def _session(model: onnx.ModelProto, ours: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    if ours:
        options.register_custom_ops_library(str(LIBRARY))
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def _refused_here(lanes: int) -> bool:
    """True where this CPU runs none of our kernels, once the library has refused to register, as it must."""
    if lanes == 0:
        with pytest.raises(Exception, match="need AVX2 and FMA"):
            ort.SessionOptions().register_custom_ops_library(str(LIBRARY))
        return True
    return False


@pytest.mark.parametrize("hidden,inner", [(64, 160), (100, 250)])  # rows of whole vectors, and with a tail
def test_a_layer_computes_what_the_build_s_ops_compute(hidden, inner, kernel_lanes):
    """Each quantizer swapped, with the norm or gate it follows and the row-scale Muls after its GEMMs; the
    layer's outputs as the build's ops give them, to fp32's rounding (7e-8 measured: the norm's sum of squares
    and the sigmoid round their own way)."""
    rng = np.random.default_rng(hidden)
    model = quantize_graph(_layer(hidden, inner, rng), Int8Scheme(outlier_ratio=None))
    feeds = {"x": (rng.standard_normal((2, 37, hidden)) * np.linspace(0.2, 3, hidden)).astype(np.float32)}
    feeds["x"][1, 5] = 0.0  # a row of zeros: its scale is the floor, its values zeros
    expected = _session(model, ours=False).run(None, feeds)
    assert fused_quantization.rewrite(model) == 3
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["QuantizeRows"] == ops["SkipNormQuantizeRows"] == ops["GatedQuantizeRows"] == 1
    assert not {"QuantizeLinear", "ReduceMax", "ReduceMin", "Sigmoid", "Expand"} & set(ops)
    assert ops["Mul"] == 1  # only the row scale of down_proj, whose norm leaves the graph unquantized
    assert ops["SkipSimplifiedLayerNormalization"] == 1
    if _refused_here(kernel_lanes):
        return
    got = _session(model, ours=True).run(None, feeds)
    for ours, theirs in zip(got, expected):
        assert ours.shape == theirs.shape
        assert np.linalg.norm(ours - theirs) <= 1e-5 * np.linalg.norm(theirs)


def _quantizer(k: int) -> onnx.ModelProto:
    """The build's quantizer alone: x [R, k] in, its uint8 rows and row scales out."""
    f = TensorProto.FLOAT
    layer = helper.make_node("MatMul", ["x", "w"], ["y"], name="/model/layers.0/attn/o_proj/MatMul")
    w = numpy_helper.from_array(np.eye(k, 8, dtype=np.float32), "w")
    graph = helper.make_graph([layer], "q", [helper.make_tensor_value_info("x", f, ["R", k])],
                              [helper.make_tensor_value_info("y", f, None)], [w])
    model = quantize_graph(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=10),
                           Int8Scheme(outlier_ratio=None))
    quantize = next(n for n in model.graph.node if n.op_type == "QuantizeLinear")
    model.graph.output.extend([helper.make_tensor_value_info(quantize.output[0], TensorProto.UINT8, None),
                               helper.make_tensor_value_info(quantize.input[1], f, None)])
    return model


@pytest.mark.parametrize("k", [1024, 1000])
def test_rows_quantize_as_the_build_s_quantizer_does(k, kernel_lanes):
    """The uint8 values and row scales themselves, equal: the same fp32 operations, rounded the same way."""
    rng = np.random.default_rng(k)
    x = rng.standard_normal((300, k)).astype(np.float32)
    x[3] = 0.0
    x[4, 7] = 1e4  # one huge value: the rest of its row rounds to few levels
    x[5] = -x[5]
    model = _quantizer(k)
    expected = _session(model, ours=False).run(None, {"x": x})
    assert fused_quantization.rewrite(model) == 1 and model.graph.node[0].op_type == "QuantizeRows"
    if _refused_here(kernel_lanes):
        return
    y, q, scale = _session(model, ours=True).run(None, {"x": x})
    np.testing.assert_array_equal(scale, expected[2])
    np.testing.assert_array_equal(q, expected[1])
    np.testing.assert_array_equal(y, expected[0])
    assert (q[3] == 128).all() and q.min() >= 1


def test_a_norm_read_elsewhere_keeps_its_node_and_only_the_quantizer_is_swapped():
    """n1 also leaves the graph: the skip norm must stay to make it, so its quantizer is QuantizeRows."""
    rng = np.random.default_rng(0)
    model = quantize_graph(_layer(64, 160, rng), Int8Scheme(outlier_ratio=None))
    model.graph.output.append(helper.make_tensor_value_info("n1", TensorProto.FLOAT, None))
    assert fused_quantization.rewrite(model) == 3
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["SkipSimplifiedLayerNormalization"] == 2 and ops["QuantizeRows"] == 2 and "SkipNormQuantizeRows" not in ops


def test_outlier_channels_keep_their_fp32_path(kernel_lanes):
    """With outlier channels split off, the quantizers read the masked input: QuantizeRows, the split untouched,
    and the layer still computes what the build's ops compute."""
    rng = np.random.default_rng(1)
    model = _layer(64, 160, rng)
    maxima = {name: np.where(np.arange(size) == 5, 50.0, 1.0) for name, size in
              (("/model/layers.0/attn/o_proj/MatMul", 64), ("/model/layers.0/mlp/gate_proj/MatMul", 64),
               ("/model/layers.0/mlp/up_proj/MatMul", 64), ("/model/layers.0/mlp/down_proj/MatMul", 160))}
    model = quantize_graph(model, Int8Scheme(), channel_maxima=maxima.get)
    x = rng.standard_normal((1, 20, 64)).astype(np.float32)
    x[..., 5] *= 40
    expected = _session(model, ours=False).run(None, {"x": x})
    assert fused_quantization.rewrite(model) == 3
    ops = Counter(n.op_type for n in model.graph.node)
    assert ops["QuantizeRows"] == 3 and ops["Gather"] == 3  # each input's outlier columns, still gathered
    if _refused_here(kernel_lanes):
        return
    for ours, theirs in zip(_session(model, ours=True).run(None, {"x": x}), expected):
        assert np.linalg.norm(ours - theirs) <= 1e-5 * np.linalg.norm(theirs)


def test_a_graph_without_the_build_s_quantizers_is_left_whole():
    model = _layer(64, 160, np.random.default_rng(2))  # fp32: nothing quantized
    before = model.SerializeToString()
    assert fused_quantization.rewrite(model) == 0 and model.SerializeToString() == before


def test_inputs_the_kernels_do_not_take_give_empty_outputs_not_a_read_past_them(kernel_lanes):
    """A gamma one short of the rows: empty outputs, which the GEMM after them refuses, never a read past gamma."""
    model = quantize_graph(_layer(64, 160, np.random.default_rng(3)), Int8Scheme(outlier_ratio=None))
    fused_quantization.rewrite(model)
    norm = next(n for n in model.graph.node if n.op_type == "SkipNormQuantizeRows")
    g1 = next(i for i in model.graph.initializer if i.name == norm.input[3])
    g1.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(g1)[:-1], g1.name))
    if _refused_here(kernel_lanes):
        return
    with pytest.raises(Exception):
        _session(model, ours=True).run(None, {"x": np.ones((1, 4, 64), np.float32)})
