"""bench/roofline.py: the work read off the profiler's shapes, the ceilings' arithmetic, and a real run on the
tiny int8 build (no timing assertions: rates are what this machine gives)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from codes.checks import roofline
from helpers.scripts import run_script


def test_gemm_dims_fold_leading_axes():
    assert roofline.gemm_dims([[1, 295, 1024], [], []], [1, 295, 4096]) == (295, 1024, 4096)
    assert roofline.gemm_dims([[2, 250, 1024]], [2, 250, 8200]) == (500, 1024, 8200)


def test_attention_macs_count_both_products():
    # 16 heads of 128 over 300 queries and 300 keys: QK^T and PV, each 16*300*300*128.
    assert roofline.attention_macs([1, 300, 2048], [1, 300, 1024], 16, 128) == 2 * 16 * 300 * 300 * 128


@pytest.mark.parametrize("op, cls", [("DynamicQuantizeMatMul", "int8 GEMM"), ("MatMulIntegerToFloat", "int8 GEMM"),
                                     ("MatMulNBits", "n-bit GEMM"), ("MatMul", "fp32 GEMM"),
                                     ("GroupQueryAttention", "attention"), ("SkipSimplifiedLayerNormalization", "the rest")])
def test_op_classes(op, cls):
    assert roofline.op_class(op) == cls


def op(name, kind, seconds, inputs, outputs, size=0, parameters=0):
    return roofline.OpRun("llm_decoder", name, kind, seconds, inputs, outputs, size, parameters)


def test_class_table_holds_each_op_to_the_best_kernel_at_its_shape():
    peaks = roofline.Peaks(
        gemm=[{"class": "int8 GEMM", "m": 100, "k": 64, "n": 32, "gmacs": 2.0},
              {"class": "n-bit GEMM", "m": 100, "k": 64, "n": 32, "gmacs": 4.0},  # an integer kernel: counts
              {"class": "fp32 GEMM", "m": 100, "k": 64, "n": 32, "gmacs": 8.0}],  # a float one: does not
        attention=[{"seq": 100, "gmacs": 1.0}, {"seq": 10, "gmacs": 5.0}],
        bandwidth_gbs=10.0)
    ops = [op("mm", "DynamicQuantizeMatMul", 1.0, [[1, 100, 64]], [[1, 100, 32]]),
           op("att", "GroupQueryAttention", 0.5, [[1, 100, 256], [1, 100, 128]], [[1, 100, 256]]),
           op("norm", "SimplifiedLayerNormalization", 0.2, [[1, 100, 64]], [[1, 100, 64]], size=4_000_000_000)]
    rows = {row["class"]: row for row in roofline.class_table(ops, peaks, num_heads=4, head_dim=64)}
    gemm = rows["int8 GEMM"]
    assert gemm["seconds"] == 1.0 and gemm["work"] == pytest.approx(100 * 64 * 32 / 1e9)
    assert gemm["peak"] == pytest.approx(4.0)  # the best integer kernel, not fp32's 8
    attention = rows["attention"]
    assert attention["work"] == pytest.approx(2 * 4 * 100 * 100 * 64 / 1e9)
    assert attention["peak"] == pytest.approx(1.0)  # at the measured length nearest 100
    rest = rows["the rest"]
    assert rest["unit"] == "GB" and rest["floor_seconds"] == pytest.approx(4.0 / 10.0)


def test_the_isa_yardstick_holds_every_gemm_shaped_mac_to_the_integer_rate():
    """Outlier channels' fp32 GEMMs and attention's two products count at the integer rate of their shapes, the
    heads at the fp32 rate, and the rest moves only what the layer's maths needs."""
    dims = {"hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
            "num_hidden_layers": 2}
    int8 = [{"class": "int8 GEMM", "m": m, "k": k, "n": n, "gmacs": rate}
            for m, k, n, rate in [(100, 64, 32, 2.0), (100, 8, 32, 0.5), (100, 16, 100, 1.0), (100, 100, 16, 1.0)]]
    peaks = roofline.Peaks(gemm=int8 + [{"class": "fp32 GEMM", "m": 100, "k": 64, "n": 32, "gmacs": 8.0},
                                        {"class": "fp32 GEMM", "m": 100, "k": 8, "n": 32, "gmacs": 16.0}],
                           attention=[{"seq": 100, "gmacs": 0.1}], bandwidth_gbs=10.0)
    ops = [roofline.OpRun("llm_decoder", "mm", "MatMulIntegerToFloat", 1.0, [[1, 100, 64]], [[1, 100, 32]], 0, 0),
           roofline.OpRun("llm_decoder", "outliers", "MatMul", 0.1, [[1, 100, 8]], [[1, 100, 32]], 0, 0),
           roofline.OpRun("audio_heads_decoder", "heads", "MatMul", 0.3, [[1, 100, 64]], [[1, 100, 32]], 0, 0),
           roofline.OpRun("llm_decoder", "att", "GroupQueryAttention", 0.5, [[1, 100, 64], [1, 100, 32]],
                          [[1, 100, 64]], 0, 0),
           roofline.OpRun("llm_decoder", "norm", "SimplifiedLayerNormalization", 0.2, [[1, 100, 64]], [[1, 100, 64]],
                          10**9, 0)]
    rows = {r["class"]: r for r in roofline.isa_table(ops, peaks, dims, intermediate=128, backbone="llm_decoder")}
    assert rows["int8 GEMM"]["isa_seconds"] == pytest.approx(100 * 64 * 32 / 1e9 / 2.0)
    # the outliers' K=8 GEMM at the integer rate of its shape (0.5), the heads' at fp32's (8.0)
    assert rows["fp32 GEMM"]["isa_seconds"] == pytest.approx(100 * 8 * 32 / 1e9 / 0.5 + 100 * 64 * 32 / 1e9 / 8.0)
    # 4 heads of Q.K^T [100 x 16] x [16 x 100] and P.V [100 x 100] x [100 x 16], at 1.0 GMAC/s (not GQA's 0.1)
    assert rows["attention"]["isa_seconds"] == pytest.approx(2 * 4 * 100 * 16 * 100 / 1e9 / 1.0)
    floats = 64 + (64 + 2 * 32) + 64 + 128 + 64
    assert roofline.layer_activation_floats(dims, 128) == floats
    assert rows["the rest"]["isa_seconds"] == pytest.approx(2 * 4 * floats * 2 * 100 / 1e9 / 10.0)
    assert all(r["unmeasured"] == 0 for r in rows.values())


def test_kernel_graphs_compute_what_they_claim():
    """The timed graphs are the products they are named for, not empty shells: DynamicQuantizeMatMul
    against numpy, and bidirectional GQA against softmax(QK^T)V with repeated key heads."""
    model, feeds = roofline.dynamic_quantize_matmul(4, 64, 8)
    got = roofline.session_for(model, 1).run(None, feeds)[0]
    weights = onnx_array(model, "B")
    want = feeds["A"] @ (weights.astype(np.float32) * 0.01)
    assert np.abs(got - want).max() < 0.02 * np.abs(want).max()  # the activations' 8-bit rounding alone

    model, feeds = roofline.gqa_graph(6, num_heads=4, kv_heads=2, head_dim=8, bias=False, rotary=False)
    assert np.abs(roofline.session_for(model, 1).run(None, feeds)[0] - attention(feeds, 8)).max() < 1e-4
    # attention in ops on the integer GEMMs: the same function, within int8's rounding
    for int8_values in (False, True):
        model, feeds = roofline.int8_attention_graph(12, num_heads=4, kv_heads=2, head_dim=16, bias=True,
                                                     int8_values=int8_values)
        got, want = roofline.session_for(model, 1).run(None, feeds)[0], attention(feeds, 16)
        assert np.linalg.norm(got - want) < 0.02 * np.linalg.norm(want), int8_values


def attention(feeds: dict, head_dim: int) -> np.ndarray:
    """softmax(QK^T / sqrt(d))V with each key head repeated for its query heads, [1, S, heads * d]."""
    q, k, v = (feeds[n][0].reshape(feeds[n].shape[1], -1, head_dim) for n in ("q", "k", "v"))
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    scores = np.einsum("shd,thd->hst", q, k) / np.sqrt(head_dim)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("hst,thd->shd", probs / probs.sum(-1, keepdims=True), v).reshape(1, q.shape[0], -1)


def onnx_array(model, name):
    from onnx import numpy_helper

    return numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == name))


def test_roofline_page_on_the_tiny_int8_build(builds, tmp_path):
    folder = builds.get("cpu_int8")
    out = tmp_path / "roofline.md"
    result = run_script("bench/roofline.py", "--model_dir", folder, "--m", "8", "--seq", "16", "--seconds", "0.01",
                        "--steps", "1", "--kernels", "avx2", "--onnx_kernels", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.with_suffix(".json").read_text())
    page = out.read_text()
    assert report["machine"]["cpu"] in page and "× from ceiling" in page and "against the ISA" in page
    assert report["bandwidth_gbs"] > 0
    assert {row["kernel"] for row in report["gemm"] if row["gmacs"]} >= {
        "DynamicQuantizeMatMul (u8 x s8)", "MatMulInteger (u8 x s8 -> s32)", "MatMul fp32"}
    for case in ("10 s utterance", "2 s reply"):
        table = report["steps"][f"{folder}|{case}"]
        classes = {row["class"]: row for row in table["classes"]}
        assert {"int8 GEMM", "attention", "the rest"} <= set(classes)
        # Every GEMM of the step was measured at its own shape, so none is left out of the ceiling.
        assert classes["int8 GEMM"]["unmeasured"] == 0 and classes["int8 GEMM"]["floor_seconds"] > 0
        assert table["tokens"] > 0
        # ... and held to the ISA: attention's products measured as integer GEMMs at their own shapes
        isa = {row["class"]: row for row in table["isa"]}
        assert isa["attention"]["unmeasured"] == 0 and isa["attention"]["isa_seconds"] > 0
        assert isa["the rest"]["isa_seconds"] > 0
    # ... and every attention length it ran.
    measured = {row["seq"] for row in report["attention"] if row["gmacs"]}
    assert len(measured) > 1 and 16 in measured
    assert report["steps"][f"{folder}|10 s utterance"]["tokens"] > report["steps"][f"{folder}|2 s reply"]["tokens"]
    # --kernels avx2 --onnx_kernels: the same build's step on our 8-lane loops and on ONNX Runtime's own ops, each a
    # row of its own beside our kernels'
    for value in ("avx2", "onnx"):
        beside = report["steps"][f"{folder} (OMNIVOICE_ONNX_KERNELS={value})|10 s utterance"]
        assert {row["class"] for row in beside["classes"]} >= {"int8 GEMM", "attention"}
        assert f"{folder.name} (OMNIVOICE_ONNX_KERNELS={value})" in page


def test_roofline_refuses_a_folder_that_is_not_a_build(tmp_path):
    result = run_script("bench/roofline.py", "--model_dir", tmp_path, "--out", tmp_path / "page.md")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path} has no omnivoice_manifest.json; pass a folder optimize.py built"]
    assert not (tmp_path / "page.md").exists()


def test_this_onnxruntime_has_the_kernels_the_roofline_times():
    """A kernel that does not run is reported as n/a on the page; here, every one must run."""
    for kernel in roofline.GEMM_KERNELS:
        model, feeds = kernel.build(4, 64, 16)
        assert roofline.time_graph(model, feeds, 1, 0.0) is not None, kernel.name
    for name, build in roofline.attention_kernels(4, 2, 16):
        model, feeds = build(8)
        assert roofline.time_graph(model, feeds, 1, 0.0) is not None, name


def test_a_gemm_that_streams_more_than_it_computes_is_held_to_the_memory_roof():
    peaks = roofline.Peaks(gemm=[{"class": "int8 GEMM", "m": 1, "k": 64, "n": 32, "gmacs": 100.0}], attention=[],
                           bandwidth_gbs=10.0)
    one_row = op("mm", "DynamicQuantizeMatMul", 1.0, [[1, 1, 64]], [[1, 1, 32]], size=1000, parameters=2_000_000_000)
    assert roofline.op_floor(one_row, peaks, num_heads=1, head_dim=1) == pytest.approx(0.2)  # 2 GB at 10 GB/s
    # A lookup reads only the rows it gathers: its table is not on the memory roof.
    lookup = op("gather", "Gather", 1.0, [[1, 1]], [[1, 1, 64]], size=1_000_000_000, parameters=2_000_000_000)
    assert roofline.op_floor(lookup, peaks, num_heads=1, head_dim=1) == pytest.approx(0.1)


def test_each_op_counts_at_its_fastest_after_the_first_step():
    """Three steps of a graph run twice a step: the first step is left out, and each run's op keeps its own
    fastest time (conditional and unconditional rows are not mixed)."""
    events = []
    for run, (cond, uncond) in enumerate([(1, 1), (5, 9), (3, 7)]):
        for half, duration in enumerate((cond, uncond)):
            start = (2 * run + half) * 100
            events.append({"name": "model_run", "ts": start, "dur": 50})
            events.append({"cat": "Node", "name": "mm_kernel_time", "ts": start + 1, "dur": duration,
                           "args": {"op_name": "MatMul", "input_type_shape": [{"float": [1, 2, 4]}],
                                    "output_type_shape": [{"float": [1, 2, 8]}], "activation_size": "32",
                                    "output_size": "64", "parameter_size": "128"}})
    ops = roofline.fastest_step(events, "llm_decoder", steps=2)
    assert sorted(op.seconds for op in ops) == [3e-6, 7e-6]
    assert all(op.input_shapes == [[1, 2, 4]] and op.bytes == 32 + 64 + 128 for op in ops)
