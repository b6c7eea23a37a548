"""The fused attention kernel (codes/runtime/native/attention.c) against ONNX Runtime's GroupQueryAttention, and
where the runtime swaps it in (codes/runtime/contract/fused_attention.py)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from codes.common.isa import FUSED_ATTENTION_FLAGS, runs_fused_attention
from codes.runtime.contract import fused_attention

RUNS_HERE = runs_fused_attention()


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
    assert fused_attention.rewrite(model) == 1
    options = ort.SessionOptions()
    if not RUNS_HERE:  # the library refuses to register where the kernel's instructions are missing
        with pytest.raises(Exception, match="needs AVX-512 VNNI and BF16"):
            options.register_custom_ops_library(str(fused_attention.LIBRARY))
        return
    options.register_custom_ops_library(str(fused_attention.LIBRARY))
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
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
    assert fused_attention.rewrite(model) == 1
    feeds = _feeds(np.random.default_rng(0), 1, 20, 4, 2, 16, 64, (20,), None)
    feeds["bias"] = feeds["bias"][..., :19].copy()
    options = ort.SessionOptions()
    if not RUNS_HERE:
        with pytest.raises(Exception, match="needs AVX-512 VNNI and BF16"):
            options.register_custom_ops_library(str(fused_attention.LIBRARY))
        return
    options.register_custom_ops_library(str(fused_attention.LIBRARY))
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
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
    assert fused_attention.rewrite(model) == 0
    assert model.SerializeToString() == before


def test_the_runtime_says_why_it_keeps_onnx_runtime_s_attention(tmp_path, monkeypatch):
    every = frozenset(FUSED_ATTENTION_FLAGS)
    built = tmp_path / "lib.so"
    built.write_bytes(b"")
    monkeypatch.delenv(fused_attention.SWITCH, raising=False)
    monkeypatch.setattr(fused_attention, "is_x86", lambda: True)
    assert fused_attention.why_not("int8", every, built) is None
    assert fused_attention.why_not("int4", every, built) is None
    assert fused_attention.why_not("fp32", every, built) == "a fp32 backbone keeps ONNX Runtime's attention"
    assert fused_attention.why_not("int8", every - {"avx512_bf16"}, built) == "this CPU lacks AVX-512 VNNI or BF16"
    assert fused_attention.why_not("int8", every, tmp_path / "absent.so") == \
        "absent.so is not built (make setup builds it)"
    monkeypatch.setenv(fused_attention.SWITCH, fused_attention.KEEP)
    assert fused_attention.why_not("int8", every, built) == "OMNIVOICE_ONNX_ATTENTION=onnx"


def test_a_quantized_build_runs_the_kernel_where_the_cpu_has_it_and_fp32_never(builds, monkeypatch):
    """The tiny cpu_int8 build's backbone: every layer's attention swapped where this CPU runs the kernel, its
    hidden states within int8's reach of ONNX Runtime's attention; cpu_fp32 stays on ONNX Runtime's (exact)."""
    from codes.runtime.synthesis import OmniVoiceOnnx

    monkeypatch.delenv(fused_attention.SWITCH, raising=False)
    assert fused_attention.LIBRARY.is_file() or not RUNS_HERE, "make setup builds the kernel on this CPU"
    int8 = OmniVoiceOnnx(builds.get("cpu_int8"), step="numpy")
    assert int8.attention_kernel == ("fused" if RUNS_HERE else "onnx")
    assert OmniVoiceOnnx(builds.get("cpu_fp32"), step="numpy").attention_kernel == "onnx"
    monkeypatch.setenv(fused_attention.SWITCH, fused_attention.KEEP)
    reference = OmniVoiceOnnx(builds.get("cpu_int8"), step="numpy")
    assert reference.attention_kernel == "onnx"
    rng = np.random.default_rng(3)
    embeds = rng.standard_normal((2, 40, int8.forward.backbone.hidden_size)).astype(np.float32)
    mask = np.ones((2, 1, 40, 40), bool)
    mask[1, 0, :, 31:] = False
    ours, theirs = int8.forward.backbone(embeds, mask), reference.forward.backbone(embeds, mask)
    for b, length in enumerate((40, 31)):
        difference = np.linalg.norm(ours[b, :length] - theirs[b, :length]) / np.linalg.norm(theirs[b, :length])
        assert difference < 0.05, difference
