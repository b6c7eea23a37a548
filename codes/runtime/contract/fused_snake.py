"""The codec's Snake activations on our kernel (codes/runtime/native/snake.c).

The exported Higgs graphs write each Snake, x + 1/(alpha + eps) * sin(alpha * x)^2, as Mul, Sin, Pow, Mul and Add
over the whole signal, and ONNX Runtime runs Sin and Pow on one thread: an fp32 decoder decodes 10 s in 0.87 s
with the op against 1.35 s without on the Zen 4 (docs/DESIGN.md §native-kernels). `rewrite` swaps each Snake for
one op that reads x once, on the session's threads, in fp32 graphs. An fp16 codec (what the profiles build) is
first made fp32 in memory (`upcast`): ONNX Runtime's CPU provider computes its ops in fp32 between casts anyway,
so its weights are widened once at load instead. Its sine is a polynomial of its own (about 1e-7 relative). Where it runs: native_kernels.py.
Torch-free: runtime code.
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto

from codes.runtime.contract.graph_edit import GraphIndex
from codes.runtime.contract.native_kernels import DOMAIN, use_domain

OP = "Snake"


def _only(g: GraphIndex, name: str, op: str):
    """The one node that reads `name`, where it is an `op` and `name` is no graph output."""
    readers = g.consumers.get(name, [])
    return readers[0] if len(readers) == 1 and readers[0].op_type == op and name not in g.outputs else None


def rewrite(model) -> int:
    """Swap each Snake of `model` (onnx.ModelProto, changed in place) for the op; returns how many."""
    from onnx import helper

    g = GraphIndex(model)
    floats = {i.name for i in model.graph.initializer if i.data_type == TensorProto.FLOAT}
    removed: set[int] = set()
    replacement: dict[int, object] = {}
    for sin in g.nodes:
        if sin.op_type != "Sin":
            continue
        scale = g.made_by(sin.input[0], "Mul")
        alpha = next((i for i in scale.input if i in floats and len(g.dims[i]) == 3), None) if scale else None
        square = _only(g, sin.output[0], "Pow")
        weigh = _only(g, square.output[0], "Mul") if square is not None else None
        add = _only(g, weigh.output[0], "Add") if weigh is not None else None
        if alpha is None or add is None or _only(g, scale.output[0], "Sin") is None:
            continue
        x = next(i for i in scale.input if i != alpha)
        exponent = g.scalar(square.input[1])
        inverse = next((i for i in weigh.input if i != square.output[0]), None)
        if exponent is None or float(exponent) != 2.0 or inverse is None or set(add.input) != {x, weigh.output[0]}:
            continue
        removed.update(id(n) for n in (scale, sin, square, weigh, add))
        replacement[id(add)] = helper.make_node(OP, [x, alpha, inverse], [add.output[0]], name=add.name, domain=DOMAIN)
    if replacement:
        g.replace(removed, replacement)
        use_domain(model)
    return len(replacement)


def upcast(model) -> bool:
    """`model` (onnx.ModelProto with its weights loaded, changed in place) in fp32 where it is in fp16: its
    weights, constants, casts and declared types; the inferred types it carries are dropped. False where it
    holds no fp16."""
    from onnx import numpy_helper

    graph = model.graph
    halves = [i for i in graph.initializer if i.data_type == TensorProto.FLOAT16]
    if not halves:
        return False
    for init in halves:
        widened = numpy_helper.to_array(init).astype(np.float32)
        init.ClearField("int32_data")  # where onnx keeps fp16 values that are not raw bytes
        init.data_type, init.raw_data = TensorProto.FLOAT, widened.tobytes()
    for node in graph.node:
        for a in node.attribute:
            if a.name == "to" and node.op_type == "Cast" and a.i == TensorProto.FLOAT16:
                a.i = TensorProto.FLOAT
            if a.type == a.TENSOR and a.t.data_type == TensorProto.FLOAT16:  # Constant, ConstantOfShape
                a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype(np.float32), a.t.name))
    for value in (*graph.input, *graph.output):
        if value.type.tensor_type.elem_type == TensorProto.FLOAT16:
            value.type.tensor_type.elem_type = TensorProto.FLOAT
    del graph.value_info[:]
    return True
