"""The codec's Snake activations on our kernel (codes/runtime/native/snake.c).

The exported Higgs graphs write each Snake, x + 1/(alpha + eps) * sin(alpha * x)^2, as Mul, Sin, Pow, Mul and Add
over the whole signal, and ONNX Runtime runs Sin and Pow on one thread: an fp32 decoder decodes 10 s in 0.87 s
with the op against 1.35 s without on the Zen 4 (docs/DESIGN.md §native-kernels). `rewrite` swaps each Snake for
one op that reads x once, on the session's threads; only in fp32 graphs (an fp16 codec keeps its ops). Its sine is a polynomial of its own (about 1e-7 relative). Where it runs: native_kernels.py.
Torch-free: runtime code.
"""

from __future__ import annotations

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
