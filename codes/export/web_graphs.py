"""The web profile's weight forms (codes/export/profiles.py web_recipe): fp16 as storage only, and int4 computed
in fp32.

- WebGPU without the shader-f16 feature (SwiftShader, many phones and older GPUs) has no fp16 kernels, so a graph
  that computes in fp16 fails there. `fp16_storage` keeps each large fp32 weight as fp16 on disk (half the
  download) behind a Cast to fp32, which ONNX Runtime folds into an fp32 constant as it loads the graph, on every
  execution provider (constant folding is a basic optimization, run before the graph is partitioned).
- MatMulNBits' accuracy_level 4 makes ONNX Runtime's x86 and ARM CPU kernels quantize activations to int8 per
  block; WASM and WebGPU ignore it and compute in fp32. Measured on the tiny int4 heads, the Python runtime gave
  logits 0.1 away (of 14) from WASM's at level 4 and 3e-6 at level 1, so the web profile asks for fp32 everywhere.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

# Small constants (scales, shapes, epsilons) stay as they are: only weights are worth halving.
MIN_STORED_ELEMENTS = 1024
FP16_MAX = float(np.finfo(np.float16).max)
FP32_ACCURACY = 1  # MatMulNBits accuracy_level: 1 = fp32 (4 = int8 activations)


def fp16_storage(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every fp32 initializer of at least MIN_STORED_ELEMENTS whose values fit fp16 stored in fp16, read through a
    Cast back to fp32; the graph's maths and its inputs and outputs stay fp32."""
    graph = model.graph
    inputs = {v.name for v in graph.input}
    casts = []
    for tensor in graph.initializer:
        if (tensor.data_type != TensorProto.FLOAT or tensor.name in inputs
                or int(np.prod(tensor.dims)) < MIN_STORED_ELEMENTS):
            continue
        values = numpy_helper.to_array(tensor)
        if not np.isfinite(values).all() or float(np.abs(values).max()) > FP16_MAX:
            continue  # fp16 would turn it into inf
        name = tensor.name
        stored = f"{name}_fp16"
        tensor.CopyFrom(numpy_helper.from_array(values.astype(np.float16), stored))
        casts.append(helper.make_node("Cast", [stored], [name], name=f"{stored}_to_fp32", to=TensorProto.FLOAT))
    nodes = casts + list(graph.node)  # before every reader
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def fp32_compute(model: onnx.ModelProto) -> onnx.ModelProto:
    """Every MatMulNBits computes in fp32 (accuracy_level 1), as the WASM and WebGPU kernels do."""
    for node in model.graph.node:
        if node.op_type == "MatMulNBits":
            for attr in [a for a in node.attribute if a.name == "accuracy_level"]:
                node.attribute.remove(attr)
            node.attribute.append(helper.make_attribute("accuracy_level", FP32_ACCURACY))
    return model
