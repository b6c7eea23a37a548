"""fp16 storage for embedding tables, with the maths kept in fp32.

Olive's whole-graph fp16 pass also turns the embeddings' ReduceSum and Where to fp16, which
ONNX Runtime's CPU provider has no kernels for; ORT then hoists the Cast back to fp32 above
the lookups and converts the whole table at load (+620 MB resident at full size). Casting
only the rows a lookup returns keeps the table memory-mapped and half the size on disk.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

# Only real tables: small constants (shapes, offsets) stay as they are.
MIN_TABLE_ELEMENTS = 1 << 16


def lookup_tables_to_fp16(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every fp32 table read only by Gather nodes becomes fp16; each such Gather gets a Cast back to fp32."""
    graph = model.graph
    initializers = {t.name: t for t in graph.initializer}
    readers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    tables = {
        name for name, tensor in initializers.items()
        if tensor.data_type == onnx.TensorProto.FLOAT and int(np.prod(tensor.dims)) >= MIN_TABLE_ELEMENTS
        and all(n.op_type == "Gather" and n.input[0] == name for n in readers.get(name, []))
    }
    for name in tables:
        table = numpy_helper.to_array(initializers[name]).astype(np.float16)
        initializers[name].CopyFrom(numpy_helper.from_array(table, name))
    nodes = []
    for node in graph.node:
        nodes.append(node)
        if node.op_type == "Gather" and node.input[0] in tables:
            rows = node.output[0]
            node.output[0] = f"{rows}_fp16"
            nodes.append(helper.make_node("Cast", [node.output[0]], [rows], name=f"{node.name}_to_fp32",
                                          to=onnx.TensorProto.FLOAT))
    del graph.node[:]
    graph.node.extend(nodes)
    return model
