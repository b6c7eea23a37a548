"""The backbone's bidirectional attention in standard ONNX ops: the web profile's form.

onnxruntime-web's WebGPU backend has a GroupQueryAttention kernel, but it refuses the form our backbone
takes (codes/export/bidirectional.py: causal=0 with an attention_bias): "GroupQueryAttention (JS): causal=0 is
not implemented". A registered kernel that refuses is no fallback to the CPU either. So each GQA node becomes
what it computes, in ops every backend has (WASM, WebGPU, onnxruntime-node and the Python runtime):

  q, k, v   [B,S,heads*hd] -> [B,S,heads,hd]
  rotary    on q and k, from the node's own cos/sin caches at positions 0..S-1 (what GQA uses for a first
            prompt without position_ids), halves or interleaved pairs as its rotary_interleaved says
  q * scale the node's `scale`, or 1/sqrt(head_dim) where it has none
  q k^T     each key/value head serves heads/kv_heads query heads: the query heads of one group are stacked
            along the sequence axis ([B,kv,group*S,hd]), so k and v are never repeated in memory
  + bias, Softmax, @ v, back to [B,S,heads*hd]

The mask plumbing that only fed GQA (seqlens_k, total_sequence_length, the 2-D key mask) is then dead and goes.
Queries whose mask row is all False (the padded positions of a shorter conditional row, never read) differ from
GQA's, which also bounds keys by seqlens_k; every other position gives GQA's hidden states to float rounding.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GQA = "GroupQueryAttention"
MS_DOMAIN = "com.microsoft"
PREFIX = "omnivoice_web_attention/"
# GQA inputs: query, key, value, past_key, past_value, seqlens_k, total_sequence_length, cos_cache, sin_cache,
# position_ids, attention_bias, head_sink.
QUERY, KEY, VALUE, PAST_KEY, PAST_VALUE = 0, 1, 2, 3, 4
COS, SIN, POSITION_IDS, BIAS, HEAD_SINK = 7, 8, 9, 10, 11
# Attributes whose default is the only value this rewrite reproduces (and their defaults).
PLAIN = {"local_window_size": -1, "softcap": 0.0, "smooth_softmax": 0, "qk_output": 0}


def standard_attention(model: onnx.ModelProto, head_dim: int) -> onnx.ModelProto:
    """Every GroupQueryAttention node of a bidirectional backbone rewritten in standard ONNX ops, in place."""
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    embeds = next(v for v in graph.input if v.name == "inputs_embeds")
    float_type = embeds.type.tensor_type.elem_type
    nodes = [n for n in graph.node if n.op_type == GQA and n.domain == MS_DOMAIN]
    if not nodes:
        raise ValueError("the backbone has no GroupQueryAttention node to rewrite")

    built = _Builder(graph, float_type)
    sequence = built.node("Shape", ["inputs_embeds"], "sequence", start=1, end=2)  # [S]
    rotaries: dict[tuple, tuple[str, str]] = {}
    replaced: dict[int, list[onnx.NodeProto]] = {}
    for index, node in enumerate(graph.node):
        if node.op_type != GQA or node.domain != MS_DOMAIN:
            continue
        attention = _Attention.of(node, head_dim)
        inputs = list(node.input) + [""] * (HEAD_SINK + 1 - len(node.input))
        if not inputs[KEY] or inputs[PAST_KEY] or inputs[PAST_VALUE] or inputs[POSITION_IDS] or inputs[HEAD_SINK]:
            raise ValueError(f"{node.name}: only separate q/k/v without past, position_ids or head_sink are rewritten")
        built.start()
        rotary = None
        if attention.do_rotary:
            key = (inputs[COS], inputs[SIN], attention.interleaved)
            if key not in rotaries:  # the tables at positions 0..S-1, once for every layer
                rotaries[key] = built.rotary_tables(inputs[COS], inputs[SIN], sequence, attention.interleaved)
            rotary = (rotaries[key], _rotary_dim(initializers, inputs[COS]))
        built.attention(node, attention, inputs[QUERY], inputs[KEY], inputs[VALUE], inputs[BIAS], rotary)
        replaced[index] = built.take()
    # The tables are built before the first layer that reads them.
    first = min(replaced)
    rewritten = list(graph.node[:first]) + built.shared
    for index, node in enumerate(graph.node[first:], start=first):
        rewritten += replaced.get(index, [node])
    unused = [name for n in nodes for name in n.output[1:] if name]
    del graph.node[:]
    graph.node.extend(rewritten)
    graph.initializer.extend(built.initializers)
    _check_unread(graph, unused)
    _remove_dead(graph)
    return model


class _Attention:
    """One GQA node's attributes, checked."""

    def __init__(self, heads: int, kv_heads: int, scale: float, do_rotary: bool, interleaved: bool, head_dim: int):
        self.heads, self.kv_heads, self.scale = heads, kv_heads, scale
        self.do_rotary, self.interleaved, self.head_dim = do_rotary, interleaved, head_dim

    @classmethod
    def of(cls, node: onnx.NodeProto, head_dim: int) -> _Attention:
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        for name, default in PLAIN.items():
            if attrs.get(name, default) != default:
                raise ValueError(f"{node.name}: {name}={attrs[name]} has no standard-op form here")
        if attrs.get("causal", 0):
            raise ValueError(f"{node.name}: a causal GroupQueryAttention is not the bidirectional backbone")
        heads, kv_heads = int(attrs["num_heads"]), int(attrs["kv_num_heads"])
        if heads % kv_heads:
            raise ValueError(f"{node.name}: {heads} query heads do not group over {kv_heads} key/value heads")
        scale = float(attrs.get("scale", 0.0)) or 1.0 / math.sqrt(head_dim)
        return cls(heads, kv_heads, scale, bool(attrs.get("do_rotary", 0)), bool(attrs.get("rotary_interleaved", 0)),
                   head_dim)


def _rotary_dim(initializers: dict, cos_cache: str) -> int:
    if cos_cache not in initializers:
        raise ValueError(f"the rotary cache {cos_cache} is not an initializer")
    return 2 * int(initializers[cos_cache].dims[1])


class _Builder:
    """Makes nodes and constants with unique names under PREFIX."""

    def __init__(self, graph: onnx.GraphProto, float_type: int):
        self.float_type = float_type
        self.taken = {name for n in graph.node for name in (*n.input, *n.output)} | {t.name for t in graph.initializer}
        self.shared: list[onnx.NodeProto] = []
        self.nodes = self.shared
        self.initializers: list[onnx.TensorProto] = []
        self.constants: dict[tuple, str] = {}

    def start(self) -> None:
        self.nodes = []

    def take(self) -> list[onnx.NodeProto]:
        nodes, self.nodes = self.nodes, self.shared
        return nodes

    def name(self, stem: str) -> str:
        name, i = PREFIX + stem, 1
        while name in self.taken:
            i += 1
            name = f"{PREFIX}{stem}_{i}"
        self.taken.add(name)
        return name

    def node(self, op: str, inputs: list[str], stem: str, output: str | None = None, **attrs) -> str:
        output = output or self.name(stem)
        self.nodes.append(helper.make_node(op, inputs, [output], name=self.name(stem + "/" + op), **attrs))
        return output

    def ints(self, values) -> str:
        key = ("int64", tuple(values))
        if key not in self.constants:
            name = self.name("const_" + "_".join(str(v).replace("-", "m") for v in values))
            self.initializers.append(numpy_helper.from_array(np.array(values, dtype=np.int64), name))
            self.constants[key] = name
        return self.constants[key]

    def scalar(self, value: float) -> str:
        key = ("float", value)
        if key not in self.constants:
            name = self.name("scale")
            self.initializers.append(helper.make_tensor(name, self.float_type, [], [value]))
            self.constants[key] = name
        return self.constants[key]

    def rotary_tables(self, cos_cache: str, sin_cache: str, sequence: str, interleaved: bool) -> tuple[str, str]:
        """cos and sin at positions 0..S-1, shaped to broadcast over [B,S,heads,rotary/2] (halves) or
        [B,S,heads,rotary/2,1] (interleaved pairs)."""
        axes = [1, 3] if interleaved else [1]
        tables = []
        for cache in (cos_cache, sin_cache):
            rows = self.node("Slice", [cache, self.ints([0]), sequence, self.ints([0])], "rotary_rows")
            if self.float_type != TensorProto.FLOAT:  # the caches are fp32; q and k may be fp16
                rows = self.node("Cast", [rows], "rotary_cast", to=self.float_type)
            tables.append(self.node("Unsqueeze", [rows, self.ints(axes)], "rotary_table"))
        return tables[0], tables[1]

    def rotate(self, x: str, tables: tuple[str, str], rotary_dim: int, head_dim: int, interleaved: bool) -> str:
        """x [B,S,heads,hd] with its first rotary_dim channels rotated as GQA's rotary does."""
        cos, sin = tables
        half = rotary_dim // 2
        passed = head_dim - rotary_dim
        if passed:
            rot = self.name("rotary_part")
            rest = self.name("rotary_pass")
            self.nodes.append(helper.make_node("Split", [x, self.ints([rotary_dim, passed])], [rot, rest],
                                               name=self.name("rotary_split/Split"), axis=-1))
            x = rot
        if interleaved:  # pairs (x[2i], x[2i+1])
            x = self.node("Reshape", [x, self.ints([0, 0, 0, half, 2])], "rotary_pairs")
            split_sizes, axis = self.ints([1, 1]), -1
        else:  # halves (x[i], x[i + half])
            split_sizes, axis = self.ints([half, half]), -1
        first, second = self.name("rotary_x1"), self.name("rotary_x2")
        self.nodes.append(helper.make_node("Split", [x, split_sizes], [first, second],
                                           name=self.name("rotary_halves/Split"), axis=axis))
        mul = lambda a, b: self.node("Mul", [a, b], "rotary_mul")  # noqa: E731
        out_first = self.node("Sub", [mul(first, cos), mul(second, sin)], "rotary_first")
        out_second = self.node("Add", [mul(second, cos), mul(first, sin)], "rotary_second")
        y = self.node("Concat", [out_first, out_second], "rotary", axis=axis)
        if interleaved:
            y = self.node("Reshape", [y, self.ints([0, 0, 0, rotary_dim])], "rotary_unpaired")
        if passed:
            y = self.node("Concat", [y, rest], "rotary_whole", axis=-1)
        return y

    def attention(self, node: onnx.NodeProto, a: _Attention, query: str, key: str, value: str, bias: str,
                  rotary: tuple | None) -> None:
        hd, groups = a.head_dim, a.heads // a.kv_heads
        q = self.node("Reshape", [query, self.ints([0, 0, a.heads, hd])], "q")  # [B,S,H,hd]
        k = self.node("Reshape", [key, self.ints([0, 0, a.kv_heads, hd])], "k")  # [B,S,KV,hd]
        v = self.node("Reshape", [value, self.ints([0, 0, a.kv_heads, hd])], "v")
        if rotary is not None:
            tables, rotary_dim = rotary
            if rotary_dim > hd:
                raise ValueError(f"{node.name}: its rotary cache covers {rotary_dim} channels of a {hd}-channel head")
            q = self.rotate(q, tables, rotary_dim, hd, a.interleaved)
            k = self.rotate(k, tables, rotary_dim, hd, a.interleaved)
        q = self.node("Mul", [q, self.scalar(a.scale)], "q_scaled")
        q = self.node("Transpose", [q], "q_heads", perm=[0, 2, 1, 3])  # [B,H,S,hd]
        q = self.node("Reshape", [q, self.ints([0, a.kv_heads, -1, hd])], "q_groups")  # [B,KV,G*S,hd]
        k = self.node("Transpose", [k], "k_t", perm=[0, 2, 3, 1])  # [B,KV,hd,S]
        scores = self.node("MatMul", [q, k], "scores")  # [B,KV,G*S,S]
        scores = self.node("Reshape", [scores, self.ints([0, a.heads, -1, 0])], "scores_heads")  # [B,H,S,S]
        if bias:
            scores = self.node("Add", [scores, bias], "scores_biased")
        probs = self.node("Softmax", [scores], "probs", axis=-1)
        if groups > 1:
            probs = self.node("Reshape", [probs, self.ints([0, a.kv_heads, -1, 0])], "probs_groups")
        v = self.node("Transpose", [v], "v_heads", perm=[0, 2, 1, 3])  # [B,KV,S,hd]
        context = self.node("MatMul", [probs, v], "context")  # [B,KV,G*S,hd]
        if groups > 1:
            context = self.node("Reshape", [context, self.ints([0, a.heads, -1, hd])], "context_heads")
        context = self.node("Transpose", [context], "context_t", perm=[0, 2, 1, 3])  # [B,S,H,hd]
        self.node("Reshape", [context, self.ints([0, 0, a.heads * hd])], "output", output=node.output[0])


def _check_unread(graph: onnx.GraphProto, names: list[str]) -> None:
    """GQA's present key/value outputs must have no reader left (make_bidirectional removed them as outputs)."""
    read = {name for n in graph.node for name in n.input} | {v.name for v in graph.output}
    still = [name for name in names if name in read]
    if still:
        raise ValueError(f"the rewritten attention's cache outputs are still read: {still}")


def _remove_dead(graph: onnx.GraphProto) -> None:
    """Drop the nodes and initializers the graph's outputs do not depend on (its inputs stay: they are its contract)."""
    needed = {v.name for v in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(name in needed for name in node.output):
            kept.append(node)
            needed.update(name for name in node.input if name)
    kept.reverse()
    del graph.node[:]
    graph.node.extend(kept)
    for tensor in [t for t in graph.initializer if t.name not in needed]:
        graph.initializer.remove(tensor)
