"""The backbone's attention on our kernel: GroupQueryAttention swapped for ai.omnivoice::BidirectionalAttention.

ONNX Runtime's CPU attention runs in fp32 at the fp32 GEMM's rate, a quarter of a quantized step on AVX-512 hosts
(bench/roofline_zen4_vnni.md). The kernel in codes/runtime/native/attention.c computes the same attention with
Q·Kᵀ in int8 and P·V in bf16, in one pass per block of query rows (docs/DESIGN.md §fused-attention). `pack` then
hands it the qkv GEMM's output as it is: the split, the row scale and Qwen3's per-head q/k norms are done as the
kernel reads each head's row, with no pass of their own. Where it runs: native_kernels.py. Torch-free: runtime
code.
"""

from __future__ import annotations

from codes.runtime.contract.graph_edit import GraphIndex, attribute
from codes.runtime.contract.native_kernels import DOMAIN, use_domain

OP = "BidirectionalAttention"
HEAD_MULTIPLE = 16  # the kernel's vectors: head sizes it runs
# GroupQueryAttention's inputs the kernel takes (query, key, value, seqlens_k, cos_cache, sin_cache,
# attention_bias), by their places; the others (past key and value, position ids, head sink) must be absent.
TAKEN, ABSENT = (0, 1, 2, 5, 7, 8, 10), (3, 4, 9, 11)


def _inputs(node) -> list[str]:
    """A GroupQueryAttention node's inputs, its absent trailing ones as "" (12 in all)."""
    return list(node.input) + [""] * (12 - len(node.input))


def rewrite(model, head_dim: int) -> int:
    """Swap each GroupQueryAttention of a first-prompt, bidirectional, rotary graph (onnx.ModelProto, changed in
    place) for the fused op; returns how many. A graph with any other kind of attention, or heads of a size the
    kernel does not run, is left whole (0)."""
    from onnx import helper

    if head_dim % HEAD_MULTIPLE:
        return 0
    graph = model.graph
    nodes = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    used = {name for n in graph.node for name in n.input} | {o.name for o in graph.output}

    def fits(node) -> bool:
        inputs = _inputs(node)
        heads = attribute(node, "num_heads", 0)
        return (attribute(node, "do_rotary", 0) == 1 and attribute(node, "rotary_interleaved", 0) == 0
                and attribute(node, "causal", 1) == 0 and attribute(node, "local_window_size", -1) == -1
                and attribute(node, "softcap", 0.0) == 0.0 and heads > 0
                and all(inputs[i] for i in TAKEN) and not any(inputs[i] for i in ABSENT)
                and not any(name in used for name in node.output[1:]))

    if not nodes or not all(fits(n) for n in nodes):
        return 0
    for node in nodes:
        inputs = _inputs(node)
        fused = helper.make_node(OP, [inputs[i] for i in TAKEN], [node.output[0]], name=node.name, domain=DOMAIN,
                                 num_heads=attribute(node, "num_heads", 0),
                                 kv_num_heads=attribute(node, "kv_num_heads", 0),
                                 scale=attribute(node, "scale", 0.0))
        node.CopyFrom(fused)
    use_domain(model)
    return len(nodes)


def _head_norm(g: GraphIndex, name: str, width: int, head_dim: int):
    """(the value before it, its weights, epsilon, its nodes) where `name` is a per-head RMSNorm's output, as the
    genai graph writes q_norm and k_norm: Reshape to [0, -1, head_dim], SimplifiedLayerNormalization, Reshape
    back to [0, -1, width]."""
    back = g.made_by(name, "Reshape")
    norm = g.made_by(back.input[0], "SimplifiedLayerNormalization") if back is not None else None
    split = g.made_by(norm.input[0], "Reshape") if norm is not None else None
    if split is None or len(norm.input) != 2 or attribute(norm, "axis", -1) != -1:
        return None
    shapes = [g.constants.get(n.input[1]) for n in (split, back)]
    if (any(s is None for s in shapes) or list(shapes[0]) != [0, -1, head_dim] or list(shapes[1]) != [0, -1, width]
            or g.dims.get(norm.input[1]) != [head_dim] or not g.only_read_by(split.output[0], [norm])
            or not g.only_read_by(norm.output[0], [back])):
        return None
    return split.input[0], norm.input[1], float(attribute(norm, "epsilon", 1e-5)), [back, norm, split]


def pack(model, head_dim: int, row_scales: set[str]) -> int:
    """Hand each fused attention of `model` (changed in place) the packed output of the qkv GEMM where its query,
    key and value are that output split, the query and key through their per-head norms; the GEMM's row-scale
    Mul (its scale one of `row_scales`) goes in too. Returns how many."""
    from onnx import helper

    g = GraphIndex(model)
    removed: set[int] = set()
    replacement: dict[int, object] = {}
    for node in g.nodes:
        if node.op_type != OP or node.domain != DOMAIN or len(node.input) != len(TAKEN):
            continue
        heads, kv_heads = attribute(node, "num_heads", 0), attribute(node, "kv_num_heads", 0)
        q, k = _head_norm(g, node.input[0], heads * head_dim, head_dim), _head_norm(g, node.input[1], kv_heads * head_dim, head_dim)
        split = g.made_by(q[0], "Split") if q is not None and k is not None else None
        if split is None or q[2] != k[2] or list(split.output) != [q[0], k[0], node.input[2]]:
            continue
        sizes = g.constants.get(split.input[1]) if len(split.input) > 1 else attribute(split, "split", None)
        if (sizes is None or [int(x) for x in sizes] != [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]
                or attribute(split, "axis", 0) not in (-1, 2) or not g.only_read_by(node.input[2], [node])
                or not all(g.only_read_by(name, [step]) for name, step in ((q[0], q[3][2]), (k[0], k[3][2])))):
            continue
        packed, scale, taken = split.input[0], "", [split, *q[3], *k[3]]
        mul = g.made_by(packed, "Mul")
        if mul is not None and g.only_read_by(packed, [split]) and any(i in row_scales for i in mul.input):
            scale = next(i for i in mul.input if i in row_scales)
            packed = next(i for i in mul.input if i != scale)
            taken.append(mul)
        fused = helper.make_node(OP, [packed, "", "", *node.input[3:], scale, q[1], k[1]], [node.output[0]],
                                 name=node.name, domain=DOMAIN, num_heads=heads, kv_num_heads=kv_heads,
                                 scale=attribute(node, "scale", 0.0), epsilon=q[2])
        removed.update(id(n) for n in taken)
        replacement[id(node)] = fused
    if replacement:
        g.replace(removed, replacement)
    return len(replacement)
