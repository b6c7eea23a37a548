"""int8 graphs: every MatMul with a constant weight rewritten to integer GEMMs, by one scheme.

The scheme (chosen by measuring, bench/quant_results.md and docs/DESIGN.md §outliers):
- weights: int8 in the full +-127 (WEIGHT_LEVELS), symmetric, a scale per output column (or one per matrix);
  the graph records the range (WEIGHT_LEVELS_KEY), and a host whose kernels would saturate on it
  re-ranges the weights at load (codes/runtime/contract/int8_weights.py);
- activations: int8, symmetric, a scale per row (token), computed per call, or one asymmetric
  uint8 scale per tensor (ORT's DynamicQuantizeLinear), or none (weight-only, W8A32);
- outlier channels: the few input channels whose calibrated magnitude dwarfs the rest stay fp32,
  in a small MatMul beside the integer one (LLM.int8's decomposition), so they set no row's scale.

Per-row int8 rides MLAS's u8 x s8 kernels (MatMulIntegerToFloat, VNNI and AVX2 alike): the
symmetric values are shifted by 128 and given zero point 128, and the per-column weight scales
are applied in the GEMM; the row scale is one Mul on the output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from codes.common.isa import FULL_RANGE
from codes.runtime.contract.graph_edit import fresh_name
from codes.runtime.contract.int8_weights import WEIGHT_LEVELS_KEY

WEIGHTS = ("column", "tensor")
ACTIVATIONS = ("token", "tensor", "none")
MS_DOMAIN = "com.microsoft"
ROW_SCALE_FLOOR = 1e-12  # an all-zero row keeps a finite scale (and quantizes to zeros)
BLOCKED_QUANTIZE_OPSET = 21  # QuantizeLinear's block_size: a scale per row without a Div before it
# Weights use all 8 bits: VNNI and AMX sum u8 x s8 products exactly in int32. x86 without VNNI sums pairs
# into int16 (vpmaddubsw), which saturates once 2 x 255 x |w| passes 32767 (4x the error, measured); there
# the runtime re-ranges the weights to +-63 at load, from the range the graph records (docs/DESIGN.md §outliers).
WEIGHT_LEVELS = FULL_RANGE


@dataclass(frozen=True)
class Int8Scheme:
    """How a graph's MatMuls become int8 (module docstring)."""

    weights: str = "column"
    activations: str = "token"
    outlier_ratio: float | None = 8.0  # a channel over this times the median channel's calibrated max stays fp32
    outlier_max: int = 8  # at most this many a MatMul input (the largest)
    smooth_alpha: float | None = None  # SmoothQuant folded into the checkpoint first (codes/export/calibration.py)
    weight_levels: int = WEIGHT_LEVELS  # 63: the 7-bit range every x86 kernel sums exactly

    def __post_init__(self):
        if self.weights not in WEIGHTS or self.activations not in ACTIVATIONS:
            raise ValueError(f"int8 scheme: weights one of {WEIGHTS}, activations one of {ACTIVATIONS}")

    @property
    def needs_calibration(self) -> bool:
        return self.outlier_ratio is not None or self.smooth_alpha is not None

    def facts(self) -> dict:
        activations = {"token": "int8, a scale per row (token), computed per call",
                       "tensor": "uint8, one scale per tensor, computed per call (DynamicQuantizeLinear)",
                       "none": "fp32 (weight-only int8: full 8-bit weights, rounded and run in fp32)"}[self.activations]
        facts = {"weights": f"int8 in +-{self.weight_levels}, a scale per {'output column' if self.weights == 'column' else 'matrix'}",
                 "weight_levels": self.weight_levels, "activations": activations}
        if self.outlier_ratio is not None:
            facts["outlier_channels"] = (f"fp32: up to {self.outlier_max} input channels a MatMul whose calibrated "
                                         f"max exceeds {self.outlier_ratio:g}x the median channel's")
        if self.smooth_alpha is not None:
            facts["smoothquant_alpha"] = self.smooth_alpha
        return facts


def outlier_channels(maxima: np.ndarray, ratio: float, most: int) -> np.ndarray:
    """The input channels whose calibrated max exceeds `ratio` x the median channel's, the `most` largest,
    in ascending order."""
    maxima = np.asarray(maxima, dtype=np.float64)
    over = np.flatnonzero(maxima > ratio * np.median(maxima))
    if len(over) > most:
        over = over[np.argsort(maxima[over])[::-1][:most]]
    return np.sort(over).astype(np.int64)


def quantize_weight(weight: np.ndarray, per_column: bool, levels: int = WEIGHT_LEVELS) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 of a [K, N] weight in +-levels: (int8 values, scales [N] or [1])."""
    peak = np.abs(weight).max(axis=0) if per_column else np.array([np.abs(weight).max()])
    scale = np.where(peak > 0, peak / levels, 1.0).astype(np.float32)
    values = np.clip(np.rint(weight / scale), -levels, levels).astype(np.int8)
    return values, scale


# The backbone's linear layers as both exporters name them: genai (/model/layers.3/attn/qkv_proj/MatMul)
# and torch (/llm/layers.3/self_attn/q_proj/MatMul).
LINEAR_NAME = re.compile(r"layers\.(\d+)/(?:self_)?(?:attn|mlp)/(\w+?)_proj/MatMul")
SITE_OF_PROJECTION = {"q": "attn", "k": "attn", "v": "attn", "qkv": "attn", "o": "o",
                      "gate": "mlp", "up": "mlp", "gate_up": "mlp", "down": "down"}


def linear_site(node_name: str) -> tuple[int, str] | None:
    """(layer, site) of a backbone MatMul by its node name; sites are the inputs that linear layers share."""
    match = LINEAR_NAME.search(node_name)
    if match is None or match.group(2) not in SITE_OF_PROJECTION:
        return None
    return int(match.group(1)), SITE_OF_PROJECTION[match.group(2)]


class _Graph:
    """Node and initializer factory for one rewrite, with unique names."""

    def __init__(self, model: onnx.ModelProto):
        self.model = model
        self.opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 17)
        self.inits: list[TensorProto] = []
        self.names = {n for node in model.graph.node for n in (*node.input, *node.output)}

    def name(self, base: str) -> str:
        return fresh_name(base, self.names)

    def const(self, base: str, value: np.ndarray) -> str:
        name = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(value), name))
        return name

    def node(self, op: str, inputs: list[str], base: str, output: str | None = None, domain: str = "", **attrs):
        out = output or self.name(f"{base}/{op}_output")
        return helper.make_node(op, inputs, [out], name=self.name(f"{base}/{op}"), domain=domain, **attrs), out

    def reduce_last(self, x: str, base: str, op: str):
        """`op` (ReduceMax, ReduceMin) over the last axis, kept."""
        if self.opset >= 18:
            return self.node(op, [x, self.const(f"{base}/last_axis", np.array([-1], np.int64))], base, keepdims=1)
        return self.node(op, [x], base, axes=[-1], keepdims=1)


def quantize_graph(model: onnx.ModelProto, scheme: Int8Scheme,
                   channel_maxima: Callable[[str], np.ndarray | None] | None = None) -> onnx.ModelProto:
    """`model` with every MatMul whose weight is a constant 2-D float initializer rewritten by `scheme`.
    channel_maxima(node name) gives a MatMul input's calibrated per-channel max |x| (for the outlier split);
    a scheme that splits needs it for every such MatMul."""
    graph = model.graph
    inits = {init.name: init for init in graph.initializer}
    uses: dict[str, int] = {}
    for node in graph.node:
        for name in node.input:
            uses[name] = uses.get(name, 0) + 1

    def quantizable(node) -> bool:
        if node.op_type != "MatMul" or node.input[1] not in inits:
            return False
        init = inits[node.input[1]]
        return len(init.dims) == 2 and init.data_type == TensorProto.FLOAT

    targets = [node for node in graph.node if quantizable(node)]
    if not targets:
        return model
    rewrite = _Graph(model)
    groups: dict[str, list] = {}
    for node in targets:
        groups.setdefault(node.input[0], []).append(node)
    channels = {a: _split_channels(a, members, scheme, channel_maxima) for a, members in groups.items()}

    prepared: dict[str, dict] = {}
    new_nodes = []
    target_ids = {id(node) for node in targets}
    for node in graph.node:
        if id(node) not in target_ids:
            new_nodes.append(node)
            continue
        a = node.input[0]
        if a not in prepared:  # the input's shared part, before its first MatMul
            nodes, prepared[a] = _prepare_input(rewrite, a, channels[a], scheme, inits[node.input[1]].dims[0])
            new_nodes += nodes
        new_nodes += _quantized_matmul(rewrite, node, numpy_helper.to_array(inits[node.input[1]]), prepared[a],
                                       channels[a], scheme)
    dropped = {node.input[1] for node in targets if uses[node.input[1]] == 1}
    kept = [init for init in graph.initializer if init.name not in dropped]
    del graph.node[:]
    graph.node.extend(new_nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept + rewrite.inits)
    if not any(o.domain == MS_DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MS_DOMAIN, 1))
    if scheme.activations != "none":
        helper.set_model_props(model, {**{p.key: p.value for p in model.metadata_props},
                                       WEIGHT_LEVELS_KEY: str(scheme.weight_levels)})
    return model


def _split_channels(a: str, members: list, scheme: Int8Scheme, channel_maxima) -> np.ndarray:
    if scheme.outlier_ratio is None or scheme.activations == "none":
        return np.zeros(0, np.int64)
    maxima = channel_maxima(members[0].name) if channel_maxima is not None else None
    if maxima is None:
        raise RuntimeError(f"int8: no calibration for the MatMul {members[0].name!r} (input {a}); the outlier split "
                           "needs every MatMul's input calibrated")
    return outlier_channels(maxima, scheme.outlier_ratio, scheme.outlier_max)


def _prepare_input(g: _Graph, a: str, split: np.ndarray, scheme: Int8Scheme, k: int) -> tuple[list, dict]:
    """The nodes every MatMul of input `a` shares: its int8 rows and row scales, its fp32 outlier columns."""
    base, nodes, prepared = a.strip("/") + "/int8", [], {}
    keep = None
    if len(split):
        mask = np.ones(k, np.float32)
        mask[split] = 0.0
        keep = g.const(f"{base}/inlier_mask", mask)
        node, prepared["outliers"] = g.node("Gather", [a, g.const(f"{base}/outlier_index", split)], base, axis=-1)
        nodes.append(node)
    if scheme.activations == "tensor":
        if keep is not None:
            node, prepared["input"] = g.node("Mul", [a, keep], base)
            nodes.append(node)
        else:
            prepared["input"] = a
    elif scheme.activations == "token":
        # The row's peak |x| as max(max x, -min x): two reads and no full-size write (an Abs would write one).
        # The outliers set no row's scale: they are zeroed first, against zeroed weight rows, which the
        # quantized rows then carry (the GEMM's sums are the same either way).
        masked = a
        if keep is not None:
            node, masked = g.node("Mul", [a, keep], base)
            nodes.append(node)
        node, high = g.reduce_last(masked, base, "ReduceMax")
        nodes.append(node)
        node, low = g.reduce_last(masked, base, "ReduceMin")
        nodes.append(node)
        node, low = g.node("Neg", [low], base)
        nodes.append(node)
        node, peak = g.node("Max", [high, low, g.const(f"{base}/floor", np.array(ROW_SCALE_FLOOR, np.float32))], base)
        nodes.append(node)
        node, prepared["row_scale"] = g.node("Mul", [peak, g.const(f"{base}/inv127", np.array(1 / 127, np.float32))], base)
        nodes.append(node)
        prepared["one"] = g.const(f"{base}/one", np.array(1.0, np.float32))
        prepared["zero_point"] = g.const(f"{base}/zero_point", np.array(128, np.uint8))
        if g.opset >= BLOCKED_QUANTIZE_OPSET:
            # One QuantizeLinear blocked over the whole row divides each row by its own scale, with the same
            # rounding as a Div before it: one full-size write and read fewer. Its zero point takes the
            # scale's shape, which the tokens decide.
            node, shape = g.node("Shape", [prepared["row_scale"]], base)
            nodes.append(node)
            node, row_zero_point = g.node("Expand", [prepared["zero_point"], shape], base)
            nodes.append(node)
            node, prepared["input"] = g.node("QuantizeLinear", [masked, prepared["row_scale"], row_zero_point], base,
                                             axis=-1, block_size=k)
        else:
            node, scaled = g.node("Div", [masked, prepared["row_scale"]], base)
            nodes.append(node)
            node, prepared["input"] = g.node("QuantizeLinear", [scaled, prepared["one"], prepared["zero_point"]], base)
        nodes.append(node)
    return nodes, prepared


def _quantized_matmul(g: _Graph, node, weight: np.ndarray, prepared: dict, split: np.ndarray,
                      scheme: Int8Scheme) -> list:
    """The nodes that replace one MatMul, writing its output."""
    base, output, nodes = node.name.strip("/") or node.output[0], node.output[0], []
    main_output = g.name(f"{base}/int8_output") if len(split) else output
    if scheme.activations == "none":
        # The reference for the others' fidelity: full 8-bit weights run in fp32 (ORT would fuse a
        # DequantizeLinear into MatMulNBits, whose default quantizes the activations too).
        values, scale = quantize_weight(weight, scheme.weights == "column", levels=127)
        rounded = g.const(f"{base}/weight_int8_rounded", values.astype(np.float32) * scale)
        node_, _ = g.node("MatMul", [node.input[0], rounded], base, output=main_output)
        return [node_]
    inlier = weight.copy()
    inlier[split] = 0.0
    values, scale = quantize_weight(inlier, scheme.weights == "column", scheme.weight_levels)
    q_weight, q_scale = g.const(f"{base}/weight_int8", values), g.const(f"{base}/weight_scale", scale)
    if scheme.activations == "tensor":
        node_, _ = g.node("DynamicQuantizeMatMul", [prepared["input"], q_weight, q_scale], base, output=main_output,
                          domain=MS_DOMAIN)
        nodes.append(node_)
    else:
        node_, unscaled = g.node("MatMulIntegerToFloat", [prepared["input"], q_weight, prepared["one"], q_scale,
                                                          prepared["zero_point"]], base, domain=MS_DOMAIN)
        nodes.append(node_)
        node_, _ = g.node("Mul", [unscaled, prepared["row_scale"]], base, output=main_output)
        nodes.append(node_)
    if len(split):
        fp32_rows = g.const(f"{base}/outlier_weight", weight[split].astype(np.float32))
        node_, outlier_part = g.node("MatMul", [prepared["outliers"], fp32_rows], base)
        nodes.append(node_)
        node_, _ = g.node("Add", [main_output, outlier_part], base, output=output)
        nodes.append(node_)
    return nodes
