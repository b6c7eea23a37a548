"""Where the runtime runs our CPU kernels (codes/runtime/contract/native_kernels.py), and a quantized build's
backbone on them against ONNX Runtime's own ops."""

from __future__ import annotations

import os

import numpy as np
import pytest

from codes.common.errors import UserError
from codes.common.isa import EIGHT_LANE_FLAGS, NATIVE_KERNEL_FLAGS
from codes.runtime.contract import kernel_graphs, native_kernels


def test_the_runtime_says_why_it_keeps_onnx_runtime_s_ops(tmp_path, monkeypatch):
    every = frozenset(NATIVE_KERNEL_FLAGS + EIGHT_LANE_FLAGS)
    built = tmp_path / "lib.so"
    built.write_bytes(b"")
    monkeypatch.delenv(native_kernels.SWITCH, raising=False)
    monkeypatch.setattr(native_kernels, "is_x86", lambda: True)
    assert native_kernels.why_not("int8", every, built) is None
    assert native_kernels.why_not("int4", every, built) is None
    assert native_kernels.why_not("fp32", every, built) == "a fp32 backbone keeps ONNX Runtime's ops"
    assert native_kernels.lanes_here(every) == 16
    assert native_kernels.why_not("int8", every - {"avx512_bf16"}, built) is None  # its AVX2 loops
    assert native_kernels.lanes_here(every - {"avx512_bf16"}) == 8
    assert native_kernels.why_not("int8", frozenset({"avx2"}), built) == "this CPU lacks AVX2 and FMA"
    assert native_kernels.why_not("int8", every, tmp_path / "absent.so") == \
        "absent.so is not built (make setup builds it)"
    monkeypatch.setenv(native_kernels.SWITCH, native_kernels.EIGHT_LANES)
    assert native_kernels.lanes_here(every) == 8 and native_kernels.why_not("int8", every, built) is None
    monkeypatch.setenv(native_kernels.SWITCH, native_kernels.KEEP)
    assert native_kernels.why_not("int8", every, built) == "OMNIVOICE_ONNX_KERNELS=onnx"
    monkeypatch.setenv(native_kernels.SWITCH, "avx512")
    with pytest.raises(UserError, match="OMNIVOICE_ONNX_KERNELS=avx512 is not a choice: use onnx"):
        native_kernels.why_not("int8", every, built)


def test_a_quantized_build_runs_our_kernels_where_the_cpu_has_them_and_fp32_never(builds, monkeypatch, kernel_lanes):
    """The tiny cpu_int8 build's backbone, at each width this CPU runs our kernels at: every row quantizer swapped,
    and at 16 lanes every layer's attention too, its hidden states within int8's reach of ONNX Runtime's ops;
    cpu_fp32 stays on ONNX Runtime's (exact)."""
    import onnx

    from codes.runtime.synthesis import OmniVoiceOnnx

    assert native_kernels.LIBRARY.is_file() or kernel_lanes == 0, "make setup builds the kernels on this CPU"
    folder = builds.get("cpu_int8")
    int8 = OmniVoiceOnnx(folder, step="numpy")
    assert int8.kernels == native_kernels.kernels_label(kernel_lanes)
    assert OmniVoiceOnnx(builds.get("cpu_fp32"), step="numpy").kernels == "onnx"
    if kernel_lanes == 0:
        return
    head_dim = int8.manifest.data["model"]["head_dim"]
    graph = kernel_graphs.fused_graph(folder / "llm_decoder.onnx", head_dim, kernel_lanes)
    ops = [n.op_type for n in onnx.load_from_string(graph).graph.node]
    layers = ops.count("GatedQuantizeRows")
    assert layers > 0 and "QuantizeLinear" not in ops
    # each layer's two norms before a GEMM (the first layer's first is a plain norm), the attention's output
    assert ops.count("SkipNormQuantizeRows") == 2 * layers - 1 and ops.count("QuantizeRows") == layers + 1
    if kernel_lanes == 16:
        # the attention reads the qkv GEMM's output as it is: no split, no per-head norms; one row-scale Mul left,
        # the last down_proj's, which the final norm (unquantized, for the heads) reads
        assert ops.count("BidirectionalAttention") == layers
        assert "Split" not in ops and ops.count("Mul") == 1 and ops.count("SimplifiedLayerNormalization") == 1
    else:  # our attention kernel needs AVX-512 VNNI and BF16: ONNX Runtime's stays
        assert ops.count("GroupQueryAttention") == layers and "BidirectionalAttention" not in ops
    monkeypatch.setenv(native_kernels.SWITCH, native_kernels.KEEP)
    reference = OmniVoiceOnnx(folder, step="numpy")
    assert reference.kernels == "onnx"
    rng = np.random.default_rng(3)
    embeds = rng.standard_normal((2, 40, int8.forward.backbone.hidden_size)).astype(np.float32)
    mask = np.ones((2, 1, 40, 40), bool)
    mask[1, 0, :, 31:] = False
    ours, theirs = int8.forward.backbone(embeds, mask), reference.forward.backbone(embeds, mask)
    for b, length in enumerate((40, 31)):
        difference = np.linalg.norm(ours[b, :length] - theirs[b, :length]) / np.linalg.norm(theirs[b, :length])
        assert difference < 0.05, difference


def test_an_avx2_only_cpu_runs_our_8_lane_kernels_on_weights_re_ranged_to_7_bits(builds, monkeypatch):
    """What an AVX2-only CPU does with a full-range cpu_int8 build, its two halves made here: the weights re-ranged
    at load (its u8 x s8 kernels would saturate on full-range ones) and our kernels at 8 lanes, ONNX Runtime's
    attention. The re-ranged weights reach the rewritten graph (its hidden states move from the full-range
    weights'), and they stay within int8's reach of ONNX Runtime's ops on the same weights."""
    from codes.common.isa import FULL_RANGE, SEVEN_BIT, native_kernel_lanes
    from codes.runtime.contract import sessions
    from codes.runtime.synthesis import OmniVoiceOnnx

    monkeypatch.setattr(sessions, "int8_weight_levels", lambda: SEVEN_BIT)
    monkeypatch.setenv(native_kernels.SWITCH, native_kernels.EIGHT_LANES)
    folder = builds.get("cpu_int8")
    ours = OmniVoiceOnnx(folder, step="numpy")
    assert ours.kernels == ("ours-avx2" if native_kernel_lanes() else "onnx")
    assert ours.forward.backbone.session.reranged_int8  # the backbone's int8 weights, handed over re-ranged
    monkeypatch.setenv(native_kernels.SWITCH, native_kernels.KEEP)
    theirs = OmniVoiceOnnx(folder, step="numpy")
    assert theirs.forward.backbone.session.reranged_int8
    embeds = np.random.default_rng(4).standard_normal((1, 30, ours.forward.backbone.hidden_size)).astype(np.float32)
    mask = np.ones((1, 1, 30, 30), bool)
    a, b = ours.forward.backbone(embeds, mask), theirs.forward.backbone(embeds, mask)
    assert np.linalg.norm(a - b) / np.linalg.norm(b) < 0.05
    monkeypatch.setattr(sessions, "int8_weight_levels", lambda: FULL_RANGE)  # the same kernels, the weights as built
    monkeypatch.setenv(native_kernels.SWITCH, native_kernels.EIGHT_LANES)
    built = OmniVoiceOnnx(folder, step="numpy")
    assert not built.forward.backbone.session.reranged_int8
    assert not np.array_equal(built.forward.backbone(embeds, mask), a)


def test_a_misspelt_switch_is_one_line_and_nothing_written(builds, tmp_path):
    from helpers.scripts import run_script

    out = tmp_path / "out.wav"
    result = run_script("inference.py", "--model_dir", builds.get("cpu_int8"), "--text", "Hello.", "--output", out,
                        env={native_kernels.SWITCH: "avx-2"})
    assert result.returncode == 2 and not out.exists()
    assert result.stderr.strip().splitlines() == [
        "error: OMNIVOICE_ONNX_KERNELS=avx-2 is not a choice: use onnx (ONNX Runtime's own ops) or avx2 (our kernels' "
        "AVX2 loops, ONNX Runtime's attention), or leave it unset (the widest this CPU runs)"]


def test_a_second_load_finds_the_rewritten_graphs_in_the_cache_and_imports_no_onnx(builds, served_build, tmp_path):
    """The rewrites are made once a graph and kept: importing onnx alone takes about a second, more than the rest
    of a load. A second process loading the same builds (cpu_int8's backbone, the fp32 codec's decoder) imports
    no onnx and runs the same ops."""
    import subprocess
    import sys

    from helpers.scripts import ROOT

    load = ("import sys, numpy as np; from codes.runtime.synthesis import OmniVoiceOnnx; "
            f"int8 = OmniVoiceOnnx({str(builds.get('cpu_int8'))!r}, step='numpy'); "
            f"codec = OmniVoiceOnnx({str(served_build)!r}, step='numpy').codec; codec.decode(np.ones((8, 5), np.int64)); "
            "print(int8.kernels, codec.session('higgs_decoder').kernels, 'onnx' in sys.modules)")
    env = {**os.environ, "OMNIVOICE_ONNX_CACHE": str(tmp_path)}
    env.pop(native_kernels.SWITCH, None)
    first, second = (subprocess.run([sys.executable, "-c", load], cwd=ROOT, env=env, capture_output=True, text=True,
                                    check=True).stdout.split() for _ in range(2))
    lanes = native_kernels.lanes_here()
    assert first[:2] == second[:2] == [native_kernels.kernels_label(lanes)] * 2
    assert second[2] == ("False" if lanes else "True")  # without our kernels nothing is rewritten, nor kept
    kept = list((tmp_path / kernel_graphs.REWRITTEN).iterdir()) if lanes else []
    assert len(kept) == (2 if lanes else 0)  # the backbone's graph and the codec's decoder
