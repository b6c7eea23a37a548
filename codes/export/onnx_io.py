"""Saving ONNX graphs into a build folder: the graph in `<name>`, its weights in `<name>.data`."""

from __future__ import annotations

from pathlib import Path

import onnx

# Weights always go to an external file, whatever their size: ONNX Runtime memory-maps external data,
# while weights inside the protobuf are read into the heap and stay there next to the prepacked copies
# its kernels make. Full-size cpu_int8 backbone: 823 MB resident after loading inline, 430 MB external.
def save_model(source: Path | onnx.ModelProto, final: Path) -> Path:
    """Write `final` and `final.name + '.data'` (a relative external-data path); small tensors stay inline."""
    from onnxruntime.transformers.onnx_model import OnnxModel

    model = source if isinstance(source, onnx.ModelProto) else onnx.load(str(source))
    # Olive's fp16 pass appends its input Casts at the end; ORT copes, the ONNX checker does not.
    OnnxModel(model).topological_sort()
    final = Path(final)
    data_file = final.with_name(final.name + ".data")
    # onnx.save appends to an existing .data file (docs/DESIGN.md §external-data): start clean.
    for stale in (final, data_file):
        stale.unlink(missing_ok=True)
    onnx.save_model(model, str(final), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data_file.name, size_threshold=1024)
    if data_file.exists():  # onnx creates it owner-only; a build is meant to be shared
        data_file.chmod(final.stat().st_mode & 0o777)
    return final


def files_of(model_file: Path) -> list[Path]:
    """The graph file and its external data, if any."""
    data_file = model_file.with_name(model_file.name + ".data")
    return [model_file, data_file] if data_file.is_file() else [model_file]


def graph_io(model_file: Path) -> tuple[list[dict], list[dict], dict]:
    """Inputs, outputs (name, dtype, shape as stored) and opsets, read without loading weights."""
    model = onnx.load(str(model_file), load_external_data=False)

    def describe(value_info) -> dict:
        tensor = value_info.type.tensor_type
        dims = [d.dim_param if d.dim_param else d.dim_value for d in tensor.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type).name
        return {"name": value_info.name, "dtype": dtype, "shape": dims}

    initializers = {t.name for t in model.graph.initializer}
    inputs = [describe(v) for v in model.graph.input if v.name not in initializers]
    outputs = [describe(v) for v in model.graph.output]
    opsets = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
    return inputs, outputs, opsets
