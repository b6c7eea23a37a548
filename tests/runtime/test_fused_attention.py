"""The fused attention kernel (codes/runtime/native/attention.c) against ONNX Runtime's GroupQueryAttention, and
the graphs it is swapped into (codes/runtime/contract/fused_attention.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from codes.common.isa import native_kernel_lanes
from codes.runtime.contract import fused_attention
from codes.runtime.contract.native_kernels import LIBRARY



def _graph(op: str, heads: int, kv_heads: int, head_dim: int, positions: int, **extra) -> onnx.ModelProto:
    """One attention node over the backbone's inputs: GroupQueryAttention as the genai graph calls it."""
    f = TensorProto.FLOAT
    inputs = [helper.make_tensor_value_info("q", f, ["B", "S", heads * head_dim]),
              helper.make_tensor_value_info("k", f, ["B", "S", kv_heads * head_dim]),
              helper.make_tensor_value_info("v", f, ["B", "S", kv_heads * head_dim]),
              helper.make_tensor_value_info("seqlens", TensorProto.INT32, ["B"]),
              helper.make_tensor_value_info("total", TensorProto.INT32, []),
              helper.make_tensor_value_info("cos", f, [positions, head_dim // 2]),
              helper.make_tensor_value_info("sin", f, [positions, head_dim // 2]),
              helper.make_tensor_value_info("bias", f, ["B", 1, "S", "S"])]
    attributes = {**dict(num_heads=heads, kv_num_heads=kv_heads, scale=head_dim ** -0.5, do_rotary=1,
                         rotary_interleaved=0, local_window_size=-1, causal=0, softcap=0.0), **extra}
    node = helper.make_node(op, ["q", "k", "v", "", "", "seqlens", "total", "cos", "sin", "", "bias"],
                            ["o", "present_k", "present_v"], domain="com.microsoft", **attributes)
    graph = helper.make_graph([node], "attention", inputs, [helper.make_tensor_value_info("o", f, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=9)


def _feeds(rng, batch: int, tokens: int, heads: int, kv_heads: int, head_dim: int, positions: int, lengths, hole):
    inverse = 1.0 / 10000 ** (np.arange(0, head_dim, 2) / head_dim)
    angles = np.arange(positions)[:, None] * inverse[None]
    mask = np.zeros((batch, 1, tokens, tokens), bool)
    for b, length in enumerate(lengths):
        mask[b, 0, :, :length] = True
    if hole is not None:
        mask[:, 0, :, hole] = False  # a key masked by the bias alone, inside the valid length
    return {"q": rng.standard_normal((batch, tokens, heads * head_dim)).astype(np.float32),
            # keys with a common offset, as trained ones have: what the smoothing is for
            "k": (rng.standard_normal((batch, tokens, kv_heads * head_dim)) + 0.7).astype(np.float32),
            "v": rng.standard_normal((batch, tokens, kv_heads * head_dim)).astype(np.float32),
            "seqlens": np.asarray(lengths, np.int32) - 1, "total": np.array(tokens, np.int32),
            "cos": np.cos(angles).astype(np.float32), "sin": np.sin(angles).astype(np.float32),
            "bias": np.where(mask, 0, np.finfo(np.float32).min).astype(np.float32)}


def _ours(model) -> ort.InferenceSession | None:
    """A session of `model` on our kernels; None where this CPU runs no attention of ours, once the library has
    shown that as it must: refusing to register below AVX2, and registering no attention at 8 lanes."""
    options = ort.SessionOptions()
    lanes = native_kernel_lanes()
    if lanes == 0:
        with pytest.raises(Exception, match="need AVX2 and FMA"):
            options.register_custom_ops_library(str(LIBRARY))
        return None
    options.register_custom_ops_library(str(LIBRARY))
    if lanes < 16:
        with pytest.raises(Exception, match=fused_attention.OP):
            ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return None
    return ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


def test_at_8_lanes_the_library_holds_no_attention(monkeypatch, kernel_lanes):
    """OMNIVOICE_ONNX_KERNELS=avx2 reaches the library: its domain then holds the row kernels alone, as on an
    AVX2-only CPU, and a graph with our attention does not load."""
    model = _graph("GroupQueryAttention", 4, 2, 16, 64)
    assert fused_attention.rewrite(model, 16) == 1
    if kernel_lanes == 0:
        assert _ours(model) is None
        return
    options = ort.SessionOptions()
    options.register_custom_ops_library(str(LIBRARY))
    if kernel_lanes == 16:
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
        return
    with pytest.raises(Exception, match=fused_attention.OP):
        ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("heads,kv_heads,head_dim,tokens,lengths,hole", [
    (4, 2, 16, 37, (37, 30), None),  # the tiny checkpoint's heads; a padded second row
    (16, 8, 128, 130, (130,), 7),  # the full size's, over two 64-key blocks and a part
    (16, 8, 128, 75, (75, 40, 1), None),  # one valid key only
])
def test_the_kernel_computes_what_group_query_attention_computes(heads, kv_heads, head_dim, tokens, lengths, hole):
    """Rotary positions, the keys past seqlens_k, the bias and grouped heads as GroupQueryAttention takes them, to
    within int8 Q·Kᵀ and bf16 P·V (about 1% on these random rows); every query row, padded ones too."""
    model = _graph("GroupQueryAttention", heads, kv_heads, head_dim, 256)
    feeds = _feeds(np.random.default_rng(tokens), len(lengths), tokens, heads, kv_heads, head_dim, 256, lengths, hole)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(["o"], feeds)[0]
    assert fused_attention.rewrite(model, head_dim) == 1
    session = _ours(model)
    if session is None:
        return
    got = session.run(["o"], feeds)[0]  # total_sequence_length: still an input of the graph, read by no node
    assert got.shape == expected.shape
    relative = np.linalg.norm(got - expected) / np.linalg.norm(expected)
    assert 0 < relative < 0.03, relative
    for b, length in enumerate(lengths):  # each row alone, so no row's error hides in the others
        row = slice(0, length)
        assert np.linalg.norm(got[b, row] - expected[b, row]) <= 0.03 * np.linalg.norm(expected[b, row])


def test_inputs_the_kernel_does_not_take_give_nan_not_a_read_past_them():
    """Its interface returns no error: a bias that is not [B,1,S,S] (here one key short) is an output of NaN."""
    model = _graph("GroupQueryAttention", 4, 2, 16, 64)
    assert fused_attention.rewrite(model, 16) == 1
    feeds = _feeds(np.random.default_rng(0), 1, 20, 4, 2, 16, 64, (20,), None)
    feeds["bias"] = feeds["bias"][..., :19].copy()
    session = _ours(model)
    if session is None:
        return
    got = session.run(["o"], feeds)[0]
    assert got.shape == (1, 20, 64) and np.isnan(got).all()


@pytest.mark.parametrize("change", [dict(causal=1), dict(rotary_interleaved=1), dict(local_window_size=64),
                                    dict(past=True), dict(present_used=True)])
def test_any_other_attention_keeps_its_graph_whole(change):
    """Causal, interleaved rotary, a window, a KV cache or a present output someone reads: not the kernel's maths."""
    extra = {k: v for k, v in change.items() if k not in ("past", "present_used")}
    model = _graph("GroupQueryAttention", 4, 2, 16, 64, **extra)
    node = model.graph.node[0]
    if change.get("past"):
        node.input[3] = "q"
    if change.get("present_used"):
        model.graph.output.append(helper.make_tensor_value_info("present_k", TensorProto.FLOAT, None))
    before = model.SerializeToString()
    assert fused_attention.rewrite(model, 16) == 0
    assert model.SerializeToString() == before


def _projected_graph(heads: int, kv_heads: int, head_dim: int, hidden: int, positions: int, rng) -> onnx.ModelProto:
    """A layer's attention as the genai graph feeds it, quantized as the build does: the qkv GEMM on the normed
    input, its output split, Qwen3's per-head q/k norms (Reshape, SimplifiedLayerNormalization, Reshape)."""
    from onnx import numpy_helper

    from codes.export.int8 import Int8Scheme, quantize_graph

    f, width = TensorProto.FLOAT, (heads + 2 * kv_heads) * head_dim

    def const(name, value):
        return numpy_helper.from_array(np.asarray(value), name)

    inverse = 1.0 / 10000 ** (np.arange(0, head_dim, 2) / head_dim)
    angles = np.arange(positions)[:, None] * inverse[None]
    inits = [const("g_in", (1 + 0.1 * rng.standard_normal(hidden)).astype(np.float32)),
             const("w_qkv", (rng.standard_normal((hidden, width)) / np.sqrt(hidden)).astype(np.float32)),
             const("g_q", (1 + 0.1 * rng.standard_normal(head_dim)).astype(np.float32)),
             const("g_k", (1 + 0.1 * rng.standard_normal(head_dim)).astype(np.float32)),
             const("sizes", np.array([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], np.int64)),
             const("heads_shape", np.array([0, -1, head_dim], np.int64)),
             const("q_shape", np.array([0, -1, heads * head_dim], np.int64)),
             const("k_shape", np.array([0, -1, kv_heads * head_dim], np.int64)),
             const("cos", np.cos(angles).astype(np.float32)), const("sin", np.sin(angles).astype(np.float32))]
    nodes = [helper.make_node("SimplifiedLayerNormalization", ["x", "g_in"], ["n"], epsilon=1e-6, axis=-1),
             helper.make_node("MatMul", ["n", "w_qkv"], ["qkv"], name="/model/layers.0/attn/qkv_proj/MatMul"),
             helper.make_node("Split", ["qkv", "sizes"], ["q0", "k0", "v"], axis=-1)]
    for part, shape in (("q", "q_shape"), ("k", "k_shape")):
        nodes += [helper.make_node("Reshape", [f"{part}0", "heads_shape"], [f"{part}1"]),
                  helper.make_node("SimplifiedLayerNormalization", [f"{part}1", f"g_{part}"], [f"{part}2"],
                                   epsilon=1e-6, axis=-1),
                  helper.make_node("Reshape", [f"{part}2", shape], [part])]
    nodes.append(helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "seqlens", "total", "cos", "sin", "",
                                                          "bias"], ["o", "present_k", "present_v"],
                                  domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads, scale=head_dim ** -0.5,
                                  do_rotary=1, rotary_interleaved=0, local_window_size=-1, causal=0, softcap=0.0))
    inputs = [helper.make_tensor_value_info("x", f, ["B", "S", hidden]),
              helper.make_tensor_value_info("seqlens", TensorProto.INT32, ["B"]),
              helper.make_tensor_value_info("total", TensorProto.INT32, []),
              helper.make_tensor_value_info("bias", f, ["B", 1, "S", "S"])]
    graph = helper.make_graph(nodes, "attention", inputs, [helper.make_tensor_value_info("o", f, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)],
                              ir_version=10)
    return quantize_graph(model, Int8Scheme(outlier_ratio=None))


@pytest.mark.parametrize("heads,kv_heads,head_dim,lengths", [(4, 2, 16, (37, 30)), (16, 8, 128, (130,))])
def test_the_kernel_takes_the_qkv_projection_as_it_is(heads, kv_heads, head_dim, lengths):
    """pack: the split, the GEMM's row scale and the per-head norms done as the kernel reads each row; the same
    attention as ONNX Runtime's ops give on the unpacked graph, within the kernel's int8 and bf16 (3%)."""
    from codes.runtime.contract import fused_quantization

    rng = np.random.default_rng(heads)
    model, tokens = _projected_graph(heads, kv_heads, head_dim, 96, 256, rng), max(lengths)
    mask = np.zeros((len(lengths), 1, tokens, tokens), bool)
    for b, length in enumerate(lengths):
        mask[b, 0, :, :length] = True
    feeds = {"x": rng.standard_normal((len(lengths), tokens, 96)).astype(np.float32),
             "seqlens": np.asarray(lengths, np.int32) - 1, "total": np.array(tokens, np.int32),
             "bias": np.where(mask, 0, np.finfo(np.float32).min).astype(np.float32)}
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(["o"], feeds)[0]
    assert fused_attention.rewrite(model, head_dim) == 1 and fused_quantization.rewrite(model) == 1
    assert fused_attention.pack(model, head_dim, fused_quantization.row_scales(model)) == 1
    ops = [n.op_type for n in model.graph.node]
    assert not {"Split", "Reshape", "Mul"} & set(ops) and ops.count("SimplifiedLayerNormalization") == 1
    attention = model.graph.node[ops.index(fused_attention.OP)]
    assert attention.input[1:3] == ["", ""] and attention.input[7] in fused_quantization.row_scales(model)
    session = _ours(model)
    if session is None:
        return
    got = session.run(["o"], feeds)[0]
    assert got.shape == expected.shape
    for b, length in enumerate(lengths):
        row = slice(0, length)
        assert 0 < np.linalg.norm(got[b, row] - expected[b, row]) <= 0.03 * np.linalg.norm(expected[b, row])
