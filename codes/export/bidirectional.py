"""Turn onnxruntime-genai's causal decoder graph into OmniVoice's bidirectional backbone.

The genai builder emits GroupQueryAttention nodes that are causal and take a
2-D key mask that only feeds `seqlens_k`; no builder option changes that
(docs/DESIGN.md §bidirectional). We set `causal=0` on every GQA node and feed its
`attention_bias` input from a new 4-D bool mask input [B,1,S,S], which
reproduces upstream's padded CFG mask exactly. The past key/value inputs and
present outputs go: every decoding step is a full-sequence forward.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

GQA = "GroupQueryAttention"
GQA_PAST_KEY, GQA_PAST_VALUE, GQA_ATTENTION_BIAS = 3, 4, 10
PREFIX = "omnivoice_bidirectional/"


def make_bidirectional(model: onnx.ModelProto) -> onnx.ModelProto:
    graph = model.graph
    embeds = next(v for v in graph.input if v.name == "inputs_embeds")
    float_type = embeds.type.tensor_type.elem_type
    batch, seq = (d.dim_param or d.dim_value for d in embeds.type.tensor_type.shape.dim[:2])

    old_mask = next(v for v in graph.input if v.name == "attention_mask")
    key_mask = PREFIX + "key_mask_2d"
    for node in graph.node:
        for i, name in enumerate(node.input):
            if name == old_mask.name:
                node.input[i] = key_mask
    graph.input.remove(old_mask)
    graph.input.insert(0, helper.make_tensor_value_info("attention_mask", TensorProto.BOOL, [batch, 1, seq, seq]))

    float_min = float(np.finfo(np.float16 if float_type == TensorProto.FLOAT16 else np.float32).min)
    bias = PREFIX + "attention_bias"
    graph.initializer.extend([
        numpy_helper.from_array(np.array([1, 2], dtype=np.int64), PREFIX + "query_axes"),
        helper.make_tensor(PREFIX + "zero", float_type, [], [0.0]),
        helper.make_tensor(PREFIX + "blocked", float_type, [], [float_min]),
    ])
    prologue = [
        # Every key some query may see counts as present; masking itself is the bias's job.
        helper.make_node("Cast", ["attention_mask"], [PREFIX + "mask_int64"], to=TensorProto.INT64),
        helper.make_node("ReduceMax", [PREFIX + "mask_int64", PREFIX + "query_axes"], [key_mask], keepdims=0),
        helper.make_node("Where", ["attention_mask", PREFIX + "zero", PREFIX + "blocked"], [bias]),
    ]
    for i, node in enumerate(prologue):
        graph.node.insert(i, node)

    past_inputs = set()
    gqa_count = 0
    for node in graph.node:
        if node.op_type != GQA:
            continue
        gqa_count += 1
        inputs = list(node.input) + [""] * max(0, GQA_ATTENTION_BIAS + 1 - len(node.input))
        past_inputs.update(inputs[GQA_PAST_KEY : GQA_PAST_VALUE + 1])
        inputs[GQA_PAST_KEY] = inputs[GQA_PAST_VALUE] = ""
        inputs[GQA_ATTENTION_BIAS] = bias
        del node.input[:]
        node.input.extend(inputs)
        for attr in [a for a in node.attribute if a.name == "causal"]:
            node.attribute.remove(attr)
        node.attribute.append(helper.make_attribute("causal", 0))
    if gqa_count == 0:
        raise ValueError("the genai graph has no GroupQueryAttention node to make bidirectional")

    for value in [v for v in graph.input if v.name in past_inputs]:
        graph.input.remove(value)
    for value in [v for v in graph.output if v.name.startswith("present.")]:
        graph.output.remove(value)
    return model
