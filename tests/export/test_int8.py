"""The int8 scheme (codes/export/int8.py) and its calibration (codes/export/calibration.py): the rewritten graph
computes exactly the scheme's arithmetic in ONNX Runtime, outlier channels are found and kept in fp32, SmoothQuant
leaves the fp32 function as it was, and the generated outlier checkpoints carry what trained weights carry."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper

from codes.export.calibration import calibrate, fold_smoothing
from codes.export.checkpoint import generated_checkpoint, load_omnivoice
from codes.export.generated import MASSIVE_CHANNELS, OUTLIER_HIDDEN_CHANNELS, outlier_channels as generated_outliers
from codes.common.isa import FULL_RANGE, SEVEN_BIT, exact_int8_products, int8_weight_levels
from codes.export.int8 import Int8Scheme, linear_site, outlier_channels, quantize_graph, quantize_weight
from codes.export.onnx_io import save_model
from codes.runtime.contract.int8_weights import WEIGHT_LEVELS_KEY, built_levels, rerange, reranged_weights
from codes.runtime.contract.sessions import fit_int8_weights, open_session
from codes.runtime.text.tokenizer import TextTokenizer

K, N = 64, 96
NODE = "/model/layers.0/mlp/down_proj/MatMul"


def linear(weight: np.ndarray, opset: int) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name=NODE)], "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, None, K])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, None, N])],
        [numpy_helper.from_array(weight, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def run(model: onnx.ModelProto, x: np.ndarray, folder) -> np.ndarray:
    """The graph saved as a build saves it and opened as the runtime opens it (its int8 weights fitted to this CPU)."""
    path = save_model(model, folder / f"graph{len(list(folder.iterdir()))}.onnx")
    return open_session(path).run(None, {"x": x})[0]


def host_weights(weight, scheme: Int8Scheme):
    """The int8 weights and scales the runtime multiplies by on this CPU: as built, or re-ranged at load."""
    values, scale = quantize_weight(weight, scheme.weights == "column", scheme.weight_levels)
    if int8_weight_levels() < scheme.weight_levels:
        values, scale = rerange(values, scale, int8_weight_levels(), scheme.weight_levels)
    return values, scale


def scheme_in_numpy(x, weight, scheme: Int8Scheme, split=()):
    """The scheme's arithmetic, written out: what the rewritten graph must compute on this CPU."""
    split = np.asarray(split, dtype=np.int64)
    inlier_w = weight.copy()
    inlier_w[split] = 0
    if scheme.activations == "none":
        values, scale = quantize_weight(weight, scheme.weights == "column", levels=127)
        return x @ (values * scale)
    values, scale = host_weights(inlier_w, scheme)
    masked = x.copy()
    masked[..., split] = 0
    if scheme.activations == "tensor":
        low, high = min(masked.min(), 0), max(masked.max(), 0)
        step = (high - low) / 255
        zero = np.clip(np.rint(-low / step), 0, 255)
        x_q = (np.clip(np.rint(masked / step) + zero, 0, 255) - zero) * step
    else:
        row = np.maximum(np.abs(masked).max(-1, keepdims=True), 1e-12) / 127
        x_q = np.clip(np.rint(x / row), -127, 127) * row
        x_q[..., split] = 0
    return x_q @ (values * scale) + x[..., split] @ weight[split]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    weight = (rng.standard_normal((K, N)) * rng.uniform(0.1, 3.0, (1, N))).astype(np.float32)
    x = rng.standard_normal((2, 7, K)).astype(np.float32)
    x[..., 5] *= 40.0  # an outlier channel
    x[0, 0, 9] = 300.0  # a massive activation in one row
    return x, weight


SCHEMES = {
    "per-token": Int8Scheme(outlier_ratio=None),
    "per-token, outliers split": Int8Scheme(outlier_ratio=8.0, outlier_max=2),
    "per-tensor, full 8 bits": Int8Scheme(weights="tensor", activations="tensor", outlier_ratio=None, weight_levels=127),
    "per-column, per-tensor activations, split": Int8Scheme(activations="tensor", outlier_ratio=8.0, outlier_max=2),
    "weight-only": Int8Scheme(activations="none", outlier_ratio=None),
}


@pytest.mark.parametrize("opset", [17, 21])
@pytest.mark.parametrize("name", SCHEMES)
def test_the_rewritten_graph_computes_the_scheme(data, name, opset, tmp_path):
    x, weight = data
    scheme = SCHEMES[name]
    maxima = np.abs(x).reshape(-1, K).max(0)
    split = outlier_channels(maxima, 8.0, 2) if scheme.outlier_ratio else ()
    if scheme.outlier_ratio:
        assert list(split) == [5, 9]
    model = quantize_graph(linear(weight, opset), scheme, lambda node: maxima)
    got = run(model, x, tmp_path)
    np.testing.assert_allclose(got, scheme_in_numpy(x, weight, scheme, split), rtol=1e-5, atol=1e-4)
    if scheme.activations == "token":  # from opset 21 one blocked QuantizeLinear divides by the row scales
        assert any(n.op_type == "Div" for n in model.graph.node) == (opset < 21)


def test_the_split_keeps_outliers_from_costing_every_row_its_precision(data, tmp_path):
    x, weight = data
    maxima = np.abs(x).reshape(-1, K).max(0)
    exact = x @ weight

    def error(scheme):
        got = run(quantize_graph(linear(weight, 21), scheme, lambda node: maxima), x, tmp_path)
        return np.linalg.norm(got - exact) / np.linalg.norm(exact)

    assert error(SCHEMES["per-token, outliers split"]) < 0.5 * error(SCHEMES["per-token"])
    assert error(SCHEMES["per-token"]) < error(SCHEMES["per-tensor, full 8 bits"])


def saturating_products(levels: int) -> tuple[np.ndarray, np.ndarray]:
    """u8 x s8 sums this CPU's MatMulInteger gives, and the exact ones: 255 times +-levels in every pair, which
    int16 pair sums (AVX2's vpmaddubsw) hold only within 7 bits."""
    a = np.full((4, 64), 255, np.uint8)
    b = np.tile(np.array([levels, levels, -levels, levels], np.int8), (64, 16))[:, :64]
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "b"], ["y"])], "products",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [4, 64])],
                              [numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=9)
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
    return got, a.astype(np.int32) @ b.astype(np.int32)


def test_the_host_is_said_to_sum_full_range_weights_exactly_only_where_its_kernels_do():
    got, exact = saturating_products(FULL_RANGE)
    assert np.array_equal(got, exact) == exact_int8_products(), (
        f"the CPU's flags say exact={exact_int8_products()}, its kernels say otherwise")
    got, exact = saturating_products(SEVEN_BIT)
    assert np.array_equal(got, exact), "7-bit weights must be exact on every CPU"


def test_rerange_keeps_the_weights_within_a_coarse_step():
    rng = np.random.default_rng(3)
    weight = (rng.standard_normal((K, N)) * rng.uniform(0.1, 3.0, (1, N))).astype(np.float32)
    values, scale = quantize_weight(weight, True, FULL_RANGE)
    narrowed, wider = rerange(values, scale, SEVEN_BIT, FULL_RANGE)
    assert narrowed.dtype == np.int8 and np.abs(narrowed).max() == SEVEN_BIT
    np.testing.assert_allclose(wider, scale * FULL_RANGE / SEVEN_BIT, rtol=1e-6)
    # the full-range value, on a grid half as fine: within half its step (plus the first rounding's half)
    assert np.all(np.abs(narrowed * wider - values * scale) <= 0.5 * wider + 1e-7)


def test_a_full_range_build_is_re_ranged_where_the_kernels_would_saturate(data, tmp_path):
    """The graph records its range; on a CPU that needs 7 bits every int8 weight is overridden at load,
    and the session then computes the re-ranged arithmetic exactly (checked here on every CPU)."""
    x, weight = data
    scheme = SCHEMES["per-token"]
    model = quantize_graph(linear(weight, 21), scheme)
    path = save_model(model, tmp_path / "full.onnx")
    assert built_levels(path) == FULL_RANGE
    assert {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}[
        WEIGHT_LEVELS_KEY] == str(FULL_RANGE)
    overrides = reranged_weights(path, SEVEN_BIT)
    int8 = [name for name, array in overrides.items() if array.dtype == np.int8]
    assert len(int8) == 1 and len(overrides) == 2 and np.abs(overrides[int8[0]]).max() <= SEVEN_BIT
    assert reranged_weights(path, FULL_RANGE) == {}
    options = ort.SessionOptions()
    keep = fit_int8_weights(options, path, SEVEN_BIT)
    got = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert len(keep) == 2
    values, scale = rerange(*quantize_weight(weight, True, FULL_RANGE), SEVEN_BIT, FULL_RANGE)
    row = np.maximum(np.abs(x).max(-1, keepdims=True), 1e-12) / 127
    np.testing.assert_allclose(got, (np.clip(np.rint(x / row), -127, 127) * row) @ (values * scale), rtol=1e-5,
                               atol=1e-4)


def test_a_split_without_calibration_is_refused_not_dropped(data):
    with pytest.raises(RuntimeError, match="no calibration"):
        quantize_graph(linear(data[1], 21), Int8Scheme(), lambda node: None)


def test_outlier_channels_are_the_largest_over_the_ratio():
    maxima = np.ones(100)
    maxima[[3, 50, 70]] = [20.0, 50.0, 9.0]
    assert list(outlier_channels(maxima, 8.0, 8)) == [3, 50, 70]
    assert list(outlier_channels(maxima, 8.0, 2)) == [3, 50]
    assert list(outlier_channels(maxima, 60.0, 8)) == []


@pytest.mark.parametrize("name, site", [
    ("/model/layers.3/attn/qkv_proj/MatMul", (3, "attn")), ("/llm/layers.12/self_attn/k_proj/MatMul", (12, "attn")),
    ("/model/layers.0/attn/o_proj/MatMul", (0, "o")), ("/llm/layers.1/mlp/up_proj/MatMul", (1, "mlp")),
    ("/model/layers.27/mlp/down_proj/MatMul", (27, "down")), ("/audio_heads/MatMul", None),
    ("/llm/layers.0/self_attn/MatMul_1", None)])
def test_linear_layers_are_found_by_both_exporters_names(name, site):
    assert linear_site(name) == site


@pytest.fixture(scope="module")
def outlier_model(tmp_path_factory):
    checkpoint = generated_checkpoint("tiny-outlier")
    return load_omnivoice(checkpoint.path), TextTokenizer.from_dir(checkpoint.path)


def test_the_outlier_checkpoint_carries_outlier_channels_and_massive_activations(outlier_model):
    model, tokenizer = outlier_model
    calibration = calibrate(model, tokenizer, num_steps=2)
    config = model.config.llm_config
    hidden, _ = generated_outliers(config.hidden_size, config.intermediate_size, config.num_hidden_layers, 0)
    for layer in calibration.maxima:
        found = outlier_channels(layer["attn"], 8.0, 8)
        assert set(hidden) <= set(found), "the generator's outlier channels stand out at every layer's input"
        massive = np.sort(layer["attn"])[::-1][:MASSIVE_CHANNELS]
        assert massive.min() > 30 * np.median(layer["attn"]), "massive activations: two channels far above the rest"
    assert len(hidden) == OUTLIER_HIDDEN_CHANNELS


def test_smoothquant_leaves_the_fp32_function_unchanged(outlier_model):
    model, tokenizer = outlier_model
    calibration = calibrate(model, tokenizer, num_steps=2)
    smoothed = copy.deepcopy(model)
    after = fold_smoothing(smoothed, calibration, 0.5)
    torch.manual_seed(0)
    embeds = torch.randn(2, 12, model.config.llm_config.hidden_size)
    mask = torch.ones(2, 1, 12, 12, dtype=torch.bool)
    with torch.inference_mode():
        before_out = model.llm(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
        after_out = smoothed.llm(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(after_out, before_out, rtol=1e-4, atol=1e-4)
    # The smoothed inputs' spread shrinks where it was widest: the outlier channels are tamed.
    spread = [layer["attn"].max() / np.median(layer["attn"]) for layer in calibration.maxima]
    tamed = [layer["attn"].max() / np.median(layer["attn"]) for layer in after.maxima]
    assert all(t < s for t, s in zip(tamed, spread))


def test_the_tied_checkpoint_differs_only_in_its_heads_and_their_top_logits_nearly_tie():
    """tiny-tied is tiny-random with near-twin classes in its audio heads: the same backbone, and each decision
    taken between twins whose logits differ by a small fraction of tiny-random's top-two gap
    (codes/export/generated.py)."""
    random_model = load_omnivoice(generated_checkpoint("tiny-random").path)
    tied_model = load_omnivoice(generated_checkpoint("tiny-tied").path)
    differs = [name for name, tensor in tied_model.state_dict().items()
               if not torch.equal(tensor, random_model.state_dict()[name])]
    assert differs == ["audio_heads.weight"]
    torch.manual_seed(0)
    embeds = torch.randn(1, 20, random_model.config.llm_config.hidden_size)
    mask = torch.ones(1, 1, 20, 20, dtype=torch.bool)

    def median_gap(model):
        with torch.inference_mode():
            hidden = model.llm(inputs_embeds=embeds, attention_mask=mask).last_hidden_state
            logits = model.audio_heads(hidden).reshape(20, 8, -1)  # a decision per codebook
        top = torch.topk(logits, 2, dim=-1).values
        return float((top[..., 0] - top[..., 1]).median())

    assert median_gap(tied_model) < 0.2 * median_gap(random_model)
