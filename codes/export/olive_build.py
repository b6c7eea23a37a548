"""Olive workflows, built inline as dicts: PyTorch -> ONNX, then int4 / fp16 when asked."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx

from codes.common.errors import UserError
from codes.common.quiet import library_output
from codes.export.onnx_io import save_model
from codes.export.profiles import GraphRecipe
from codes.export.submodels import SubModel
from codes.runtime.contract.specs import ONNX_OPSET, SubModelSpec

USER_SCRIPT = Path(__file__).resolve().parents[2] / "user_script.py"


def olive_export(entry: SubModel, source: Path, recipe: GraphRecipe, out_dir: Path, work_dir: Path) -> Path:
    """Run one Olive workflow (conversion, then the recipe's passes and transform) and save its
    model as out_dir/<the graph's file name>."""
    import olive

    _telemetry_off()
    spec = entry.export_spec(source)
    loader, dummy_inputs_func = entry.olive_names
    run_dir = Path(work_dir) / spec.key
    config = {
        "input_model": {
            "type": "PyTorchModel",
            "model_path": str(source),
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
            **recipe.olive_passes,
        },
        "host": "local_system",
        "target": "local_system",
        "cache_dir": str(run_dir / "cache"),
        "output_dir": str(run_dir / "out"),
        "log_severity_level": 3,
    }
    with library_output(f"Olive ({spec.key})"):
        olive.run(config)
    produced = run_dir / "out" / "model.onnx"
    # A failed Olive pass only logs a warning, so the output itself is the check.
    if not produced.is_file():
        raise UserError(f"Olive produced no model for {spec.key} ({recipe.precision}); see the log above for the failing pass")
    model = onnx.load(str(produced))
    final = save_model(recipe.apply(model), Path(out_dir) / spec.filename)
    shutil.rmtree(run_dir, ignore_errors=True)
    return final


def _telemetry_off() -> None:
    """Olive's telemetry, never started: it sends a heartbeat and, where the network drops it, holds every
    build's exit for 10-20 s (OLIVE_DISABLE_TELEMETRY=1 still sends the heartbeat first)."""
    from olive.telemetry.telemetry import Telemetry

    telemetry = Telemetry.__new__(Telemetry)  # the singleton, before anything in Olive initializes it
    if not telemetry._initialized:  # olive-ai==0.13.0's fields (requirements.txt pins it)
        telemetry._logger = telemetry._cache_handler = None
        telemetry._initialized = True


def _olive_io_config(spec: SubModelSpec) -> dict:
    io = spec.io_config()
    # Olive's config validation wants string keys for axis indices.
    io["dynamic_axes"] = {name: {str(k): v for k, v in axes.items()} for name, axes in io["dynamic_axes"].items()}
    return io
