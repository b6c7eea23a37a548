"""The backbone's attention on the fused kernel: GroupQueryAttention swapped for ai.omnivoice::BidirectionalAttention.

ONNX Runtime's CPU attention runs in fp32 at the fp32 GEMM's rate, a quarter of a quantized step on AVX-512 hosts
(bench/roofline_zen4_vnni.md). The kernel in codes/runtime/native/attention.c computes the same attention with
Q·Kᵀ in int8 and P·V in bf16, in one pass per block of query rows (docs/DESIGN.md §fused-attention). It is not
in the build: a build stays what every ONNX Runtime runs (the JavaScript runtime, other CPUs, CUDA), and the
runtime swaps the op in at load, where the graph is quantized anyway, the host has the instruction sets and the
library is built (`make setup`). Torch-free: runtime code.
"""

from __future__ import annotations

import os
from pathlib import Path

from codes.common.isa import is_x86, runs_fused_attention

LIBRARY = Path(__file__).resolve().parents[1] / "native" / "libomnivoice_attention.so"
DOMAIN, OP = "ai.omnivoice", "BidirectionalAttention"
# OMNIVOICE_ONNX_ATTENTION=onnx keeps ONNX Runtime's own attention (to compare, or to rule the kernel out)
SWITCH, KEEP = "OMNIVOICE_ONNX_ATTENTION", "onnx"
PRECISIONS = ("int8", "int4")  # backbones already below fp32; cpu_fp32 stays token for token with upstream
HEAD_MULTIPLE = 16  # the kernel's vectors: head sizes it runs
# GroupQueryAttention's inputs the kernel takes (query, key, value, seqlens_k, cos_cache, sin_cache,
# attention_bias), by their places; the others (past key and value, position ids, head sink) must be absent.
TAKEN, ABSENT = (0, 1, 2, 5, 7, 8, 10), (3, 4, 9, 11)


def why_not(precision: str | None, flags: frozenset[str] | None = None, library: Path = LIBRARY) -> str | None:
    """None where a backbone of this precision runs the fused kernel here; else why not, in a few words."""
    if os.environ.get(SWITCH) == KEEP:
        return f"{SWITCH}={KEEP}"
    if precision not in PRECISIONS:
        return f"a {precision} backbone keeps ONNX Runtime's attention"
    if not is_x86() or not runs_fused_attention(flags):
        return "this CPU lacks AVX-512 VNNI or BF16"
    if not library.is_file():
        return f"{library.name} is not built (make setup builds it)"
    return None


def _attribute(node, name: str, default):
    from onnx import helper

    found = [a for a in node.attribute if a.name == name]
    return helper.get_attribute_value(found[0]) if found else default


def _inputs(node) -> list[str]:
    """A GroupQueryAttention node's inputs, its absent trailing ones as "" (12 in all)."""
    return list(node.input) + [""] * (12 - len(node.input))


def rewrite(model) -> int:
    """Swap each GroupQueryAttention of a first-prompt, bidirectional, rotary graph (onnx.ModelProto, changed in
    place) for the fused op; returns how many. A graph with any other kind of attention is left whole (0)."""
    from onnx import helper

    graph = model.graph
    nodes = [n for n in graph.node if n.op_type == "GroupQueryAttention"]
    used = {name for n in graph.node for name in n.input} | {o.name for o in graph.output}

    def fits(node) -> bool:
        inputs = _inputs(node)
        heads = _attribute(node, "num_heads", 0)
        return (_attribute(node, "do_rotary", 0) == 1 and _attribute(node, "rotary_interleaved", 0) == 0
                and _attribute(node, "causal", 1) == 0 and _attribute(node, "local_window_size", -1) == -1
                and _attribute(node, "softcap", 0.0) == 0.0 and heads > 0
                and all(inputs[i] for i in TAKEN) and not any(inputs[i] for i in ABSENT)
                and not any(name in used for name in node.output[1:]))

    if not nodes or not all(fits(n) for n in nodes):
        return 0
    for node in nodes:
        inputs = _inputs(node)
        fused = helper.make_node(OP, [inputs[i] for i in TAKEN], [node.output[0]], name=node.name, domain=DOMAIN,
                                 num_heads=_attribute(node, "num_heads", 0),
                                 kv_num_heads=_attribute(node, "kv_num_heads", 0),
                                 scale=_attribute(node, "scale", 0.0))
        node.CopyFrom(fused)
    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
    return len(nodes)


def fused_graph(path: Path, head_dim: int) -> bytes | None:
    """The graph at `path` (its weights stay in their files) with the fused op, serialized; None where it has no
    attention the kernel takes."""
    import onnx

    if head_dim % HEAD_MULTIPLE:
        return None
    model = onnx.load(str(path), load_external_data=False)
    return model.SerializeToString() if rewrite(model) else None
