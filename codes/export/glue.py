"""The glue graphs: what joins the backbone's graphs on the execution provider, typed for one build.

Between the embeddings, the backbone and the heads a step only moves and casts tensors: the
conditional rows' target windows are gathered, the unconditional rows appended, and the gpu
profile's fp16 backbone gets fp16 in and gives fp16 out. As graphs, ONNX Runtime keeps all of it
on the device (docs/DESIGN.md §step-on-device). They hold no weights, so they are written with
onnx.helper from the built graphs' own input and output types rather than exported from torch.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from codes.export.onnx_io import save_model
from codes.runtime.contract import specs

# ONNX Runtime 1.31 reads up to IR 11; opset 17 has GatherND's batch_dims.
IR_VERSION = 8


def _tensor_type(dtype: str) -> int:
    return helper.np_dtype_to_tensor_dtype(np.dtype(dtype))


def _value(tensor: specs.TensorSpec, elem_type: int):
    return helper.make_tensor_value_info(tensor.name, elem_type, list(tensor.shape))


def _model(spec: specs.SubModelSpec, nodes: list, types: dict[str, int]) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, spec.key, [_value(t, types[t.name]) for t in spec.inputs],
                              [_value(t, types[t.name]) for t in spec.outputs])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", specs.ONNX_OPSET)],
                              producer_name="omnivoice-onnx")
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def backbone_input_graph(embeds_dtype: str, backbone_dtype: str, hidden_size: int) -> onnx.ModelProto:
    """inputs_embeds (the embeddings' type) -> backbone_embeds (the backbone's input type)."""
    spec = specs.BACKBONE_INPUT.sized(hidden_size)
    source, target = (t.name for t in (*spec.inputs, *spec.outputs))
    nodes = [helper.make_node("Cast", [source], [target], to=_tensor_type(backbone_dtype))]
    return _model(spec, nodes, {source: _tensor_type(embeds_dtype), target: _tensor_type(backbone_dtype)})


def target_windows_graph(hidden_dtype: str, heads_dtype: str, hidden_size: int) -> onnx.ModelProto:
    """[items, sequence, H] conditional and [items, target, H] unconditional hidden states (the
    backbone's output type) -> the heads' input [2 items, target, H] (the heads' input type)."""
    spec = specs.TARGET_WINDOWS.sized(hidden_size)
    cond, uncond, index = spec.input_names
    (windows,) = spec.output_names
    joined = windows if hidden_dtype == heads_dtype else "joined"
    nodes = [
        helper.make_node("GatherND", [cond, index], ["cond_windows"], batch_dims=1),
        helper.make_node("Concat", ["cond_windows", uncond], [joined], axis=0),
    ]
    if joined != windows:
        nodes.append(helper.make_node("Cast", [joined], [windows], to=_tensor_type(heads_dtype)))
    hidden = _tensor_type(hidden_dtype)
    return _model(spec, nodes, {cond: hidden, uncond: hidden, index: TensorProto.INT64,
                                windows: _tensor_type(heads_dtype)})


def _dtype(entry: dict, side: str, name: str) -> str:
    return next(t["dtype"] for t in entry[side] if t["name"] == name)


def build_glue(graphs: dict[str, dict], hidden_size: int, folder: Path) -> dict[str, Path]:
    """The glue graphs for a build whose backbone graphs' manifest entries are `graphs`, written into
    `folder`; returns the paths by key. The backbone input cast exists only where types differ."""
    embeds = _dtype(graphs[specs.EMBEDDINGS.key], "outputs", specs.EMBEDDINGS.output_names[0])
    backbone_in = _dtype(graphs[specs.BACKBONE.key], "inputs", "inputs_embeds")
    backbone_out = _dtype(graphs[specs.BACKBONE.key], "outputs", specs.BACKBONE.output_names[0])
    heads_in = _dtype(graphs[specs.HEADS.key], "inputs", specs.HEADS.input_names[0])
    models = {specs.TARGET_WINDOWS: target_windows_graph(backbone_out, heads_in, hidden_size)}
    if embeds != backbone_in:
        models[specs.BACKBONE_INPUT] = backbone_input_graph(embeds, backbone_in, hidden_size)
    return {spec.key: save_model(model, folder / spec.filename) for spec, model in models.items()}
