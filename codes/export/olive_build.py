"""Olive workflows, built inline as dicts: PyTorch -> ONNX, then int4 / fp16 when asked."""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path

import onnx

from codes.common.errors import UserError
from codes.runtime.specs import ONNX_OPSET, SubModelSpec
from codes.export.onnx_io import save_model

USER_SCRIPT = Path(__file__).resolve().parents[2] / "user_script.py"

# Small blocks keep int4 argmax choices close to fp32 (docs/DESIGN.md §precision); these graphs are
# a few percent of the compute, so the finer scales cost nothing measurable.
INT4_BLOCK_SIZE = 32


def precision_passes(precision: str) -> dict:
    """The passes after conversion that give a sub-model its precision."""
    if precision == "fp32":
        return {}
    if precision == "fp16":
        return {"to_fp16": {"type": "OnnxFloatToFloat16", "keep_io_types": True}}
    if precision == "int8":  # dynamic int8: int8 weights, activations quantized per call (MatMulInteger)
        return {"to_int8": {"type": "OnnxDynamicQuantization", "precision": "int8",
                            "op_types_to_quantize": ["MatMul"]}}
    if precision == "int4":
        return {
            "to_int4": {
                "type": "OnnxBlockWiseRtnQuantization",
                "block_size": INT4_BLOCK_SIZE,
                "is_symmetric": True,
                "accuracy_level": 4,
            }
        }
    raise UserError(f"precision {precision!r} is not one of fp32, fp16, int8, int4")


def olive_export(
    spec: SubModelSpec,
    model_path: Path,
    loader: str,
    dummy_inputs_func: str,
    precision: str,
    out_dir: Path,
    work_dir: Path,
    extra_passes: dict | None = None,
    transform: Callable[[onnx.ModelProto], onnx.ModelProto] | None = None,
) -> Path:
    """Run one Olive workflow (then `transform`, if given) and save its model as out_dir/spec.filename."""
    import olive

    run_dir = Path(work_dir) / spec.key
    config = {
        "input_model": {
            "type": "PyTorchModel",
            "model_path": str(model_path),
            "model_script": str(USER_SCRIPT),
            "model_loader": loader,
            "io_config": _olive_io_config(spec),
            "dummy_inputs_func": dummy_inputs_func,
        },
        "systems": {
            "local_system": {
                "type": "LocalSystem",
                "accelerators": [{"device": "cpu", "execution_providers": ["CPUExecutionProvider"]}],
            }
        },
        "passes": {
            "convert": {"type": "OnnxConversion", "target_opset": ONNX_OPSET},
            **(extra_passes or {}),
            **precision_passes(precision),
        },
        "host": "local_system",
        "target": "local_system",
        "cache_dir": str(run_dir / "cache"),
        "output_dir": str(run_dir / "out"),
        "log_severity_level": 3,
    }
    logging.getLogger("olive").setLevel(logging.WARNING)
    olive.run(config)
    produced = run_dir / "out" / "model.onnx"
    # A failed Olive pass only logs a warning, so the output itself is the check.
    if not produced.is_file():
        raise UserError(f"Olive produced no model for {spec.key} ({precision}); see the log above for the failing pass")
    model = onnx.load(str(produced))
    final = save_model(transform(model) if transform else model, Path(out_dir) / spec.filename)
    shutil.rmtree(run_dir, ignore_errors=True)
    return final


def _olive_io_config(spec: SubModelSpec) -> dict:
    io = spec.io_config()
    # Olive's config validation wants string keys for axis indices.
    io["dynamic_axes"] = {name: {str(k): v for k, v in axes.items()} for name, axes in io["dynamic_axes"].items()}
    return io
