"""A quantized backbone's per-token int8 activations on our kernels (codes/runtime/native/quantize_rows.c).

The build quantizes each linear layer's input by row (codes/export/int8.py): ReduceMax, ReduceMin, Neg, Max,
a Mul by 1/127, Shape, Expand and a blocked QuantizeLinear, then a Mul of each GEMM's output by the row scale.
Each such quantizer is swapped for one op, with what it follows where that is a norm or the MLP's gate:
- after SkipSimplifiedLayerNormalization: SkipNormQuantizeRows, which also takes the row-scale Mul of the
  GEMM whose output is the skip (o_proj, down_proj);
- after SiLU(gate) x up: GatedQuantizeRows, which also takes gate's and up's row-scale Muls;
- anywhere else (the attention's output, the first layer's norm, an input with outlier channels split off):
  QuantizeRows.
The values are the same maths in fp32; only the order of a sum (the norm's squares) and the sigmoid's own
rounding differ, so a quantized value can move by one level where it sat on a rounding edge
(tests/runtime/test_fused_quantization.py). Where it runs: native_kernels.py. Torch-free: runtime code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from codes.runtime.contract.graph_edit import GraphIndex, attribute
from codes.runtime.contract.native_kernels import DOMAIN, use_domain

INV127 = np.float32(1 / 127)  # the build's row scale: peak x this
ZERO_POINT = 128  # the build's uint8 zero point for its symmetric rows
OPS = ("QuantizeRows", "SkipNormQuantizeRows", "GatedQuantizeRows")


@dataclass
class Quantizer:
    """One row quantizer of the build: x in, q and its row scale out, and the nodes that make them."""
    x: str
    q: str
    scale: str
    floor: float
    nodes: list


def quantizers(g: GraphIndex) -> list[Quantizer]:
    """The build's row quantizers, each exactly as codes/export/int8.py writes them."""
    found = []
    for ql in g.nodes:
        if ql.op_type != "QuantizeLinear" or len(ql.input) != 3 or attribute(ql, "axis", 1) != -1:
            continue
        x, rs, zp = ql.input
        scale_mul, expand = g.made_by(rs, "Mul"), g.made_by(zp, "Expand")
        if scale_mul is None or expand is None:
            continue
        peak_name = next((i for i in scale_mul.input if g.scalar(i) is None), None)
        inv = [g.scalar(i) for i in scale_mul.input if g.scalar(i) is not None]
        peak, shape = g.made_by(peak_name or "", "Max"), g.made_by(expand.input[1], "Shape")
        zero_point = g.scalar(expand.input[0])
        if (peak is None or shape is None or shape.input[0] != rs or len(inv) != 1 or inv[0] != INV127
                or zero_point is None or zero_point.dtype != np.uint8 or int(zero_point) != ZERO_POINT
                or len(peak.input) != 3):
            continue
        high, neg, floor = g.made_by(peak.input[0], "ReduceMax"), g.made_by(peak.input[1], "Neg"), g.scalar(peak.input[2])
        low = g.made_by(neg.input[0], "ReduceMin") if neg is not None else None
        if high is None or low is None or floor is None or high.input[0] != x or low.input[0] != x:
            continue
        if attribute(high, "keepdims", 1) != 1 or attribute(low, "keepdims", 1) != 1:
            continue
        if any(_reduced_axes(g, n) != [-1] for n in (high, low)):
            continue
        nodes = [high, low, neg, peak, scale_mul, shape, expand, ql]
        inner = [high.output[0], low.output[0], neg.output[0], peak.output[0], shape.output[0], expand.output[0]]
        if all(g.only_read_by(name, nodes) for name in inner):
            found.append(Quantizer(x, ql.output[0], rs, float(floor), nodes))
    return found


def _reduced_axes(g: GraphIndex, node) -> list[int] | None:
    if len(node.input) > 1:  # opset 18: the axes as an input
        axes = g.constants.get(node.input[1])
        return None if axes is None else [int(a) for a in axes.reshape(-1)]
    return list(attribute(node, "axes", [])) or None


def _row_scaled(g: GraphIndex, name: str, scales: set[str], readers: list):
    """(the GEMM output, its row scale) where `name` is a row-scale Mul's output read by `readers` alone."""
    mul = g.made_by(name, "Mul")
    if mul is None or not g.only_read_by(name, readers):
        return None
    a, b = mul.input
    if b in scales:
        return mul, a, b
    if a in scales:
        return mul, b, a
    return None


def _skip_fusion(g: GraphIndex, quantizer: Quantizer, scales: set[str]):
    """SkipNormQuantizeRows's inputs and outputs for a quantizer after a skip norm, and the nodes it takes."""
    norm = g.made_by(quantizer.x, "SkipSimplifiedLayerNormalization", "com.microsoft")
    if (norm is None or len(norm.input) != 3 or norm.output[0] != quantizer.x
            or not g.only_read_by(quantizer.x, quantizer.nodes)
            or any(o and g.consumers.get(o) for o in norm.output[1:3])):
        return None
    residual, skip, gamma = norm.input
    total = norm.output[3] if len(norm.output) > 3 and norm.output[3] else g.fresh(f"{norm.name}/sum")
    taken, scale = [norm], ""
    for first, second in ((skip, residual), (residual, skip)):  # the sum is the same either way round
        scaled = _row_scaled(g, first, scales, [norm])
        if scaled is not None:
            mul, skip, scale = scaled
            residual = second
            taken.append(mul)
            break
    return ("SkipNormQuantizeRows", [residual, skip, scale, gamma], [quantizer.q, quantizer.scale, total], taken,
            {"epsilon": float(attribute(norm, "epsilon", 1e-6))})


def _gated_fusion(g: GraphIndex, quantizer: Quantizer, scales: set[str]):
    """GatedQuantizeRows's inputs and outputs for a quantizer after SiLU(gate) x up, and the nodes it takes."""
    product = g.made_by(quantizer.x, "Mul")
    if product is None or not g.only_read_by(quantizer.x, quantizer.nodes):
        return None
    for silu_name, up in (tuple(product.input), tuple(product.input)[::-1]):
        silu = g.made_by(silu_name, "Mul")
        if silu is None or not g.only_read_by(silu_name, [product]) or up == silu_name:
            continue
        for gate, sig_name in (tuple(silu.input), tuple(silu.input)[::-1]):
            sigmoid = g.made_by(sig_name, "Sigmoid")
            if sigmoid is None or sigmoid.input[0] != gate or not g.only_read_by(sig_name, [silu]):
                continue
            taken, scale = [product, silu, sigmoid], ""
            gate_scaled = _row_scaled(g, gate, scales, [sigmoid, silu])
            up_scaled = _row_scaled(g, up, scales, [product])
            if gate_scaled is not None and up_scaled is not None and gate_scaled[2] == up_scaled[2]:
                taken += [gate_scaled[0], up_scaled[0]]
                gate, up, scale = gate_scaled[1], up_scaled[1], gate_scaled[2]
            return "GatedQuantizeRows", [gate, up, scale], [quantizer.q, quantizer.scale], taken, {}
    return None


def row_scales(model) -> set[str]:
    """The row scales our quantizers in `model` make: what a GEMM's output is multiplied by."""
    return {n.output[1] for n in model.graph.node if n.domain == DOMAIN and n.op_type in OPS}


def rewrite(model) -> int:
    """Swap each of the build's row quantizers in `model` (onnx.ModelProto, changed in place) for our op, with
    the norm or gate it follows (module docstring); returns how many."""
    from onnx import helper

    g = GraphIndex(model)
    found = quantizers(g)
    if not found:
        return 0
    scales = {q.scale for q in found}
    removed: set[int] = set()
    replacement: dict[int, object] = {}
    for quantizer in found:
        fusion = _skip_fusion(g, quantizer, scales) or _gated_fusion(g, quantizer, scales)
        if fusion is None:
            fusion = "QuantizeRows", [quantizer.x], [quantizer.q, quantizer.scale], [], {}
        op, inputs, outputs, taken, attributes = fusion
        node = helper.make_node(op, inputs, outputs, name=quantizer.nodes[-1].name, domain=DOMAIN,
                                floor=quantizer.floor, **attributes)
        removed.update(id(n) for n in quantizer.nodes + taken)
        replacement[id(quantizer.nodes[-1])] = node
    g.replace(removed, replacement)
    use_domain(model)
    return len(found)
