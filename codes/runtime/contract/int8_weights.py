"""An int8 graph's weights fitted to this host's integer kernels at load.

A build writes full-range weights (+-127, codes/export/int8.py) and records the range in the graph's
metadata. Where this CPU's u8 x s8 kernels would saturate on them (x86 without VNNI or AMX,
codes/common/isa.py), the weights are re-ranged to +-63 as the session opens: the same values on a
grid half as fine, with the scales doubled, handed to ONNX Runtime as initializers that override the
file's. Nothing on disk changes, and the build gives right audio on any CPU it is copied to.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

WEIGHT_LEVELS_KEY = "omnivoice.int8_weight_levels"
# op type -> (weight input, its scale input): the integer GEMMs whose weights the int8 rewrite writes
WEIGHT_INPUTS = {"MatMulIntegerToFloat": (1, 3), "DynamicQuantizeMatMul": (1, 2)}


def rerange(values: np.ndarray, scale: np.ndarray, levels: int, built_levels: int) -> tuple[np.ndarray, np.ndarray]:
    """int8 `values` in +-built_levels (with their `scale`) on the coarser grid +-levels."""
    ratio = levels / built_levels
    narrowed = np.clip(np.rint(values.astype(np.float32) * ratio), -levels, levels).astype(np.int8)
    return narrowed, (np.asarray(scale, np.float32) / np.float32(ratio)).astype(np.float32)


def built_levels(path: Path, model=None) -> int | None:
    """The weight range a graph file records (None: not an int8 graph of ours, or written before it was recorded);
    `model`: the graph already read, without its weights."""
    import onnx

    model = model if model is not None else onnx.load(str(path), load_external_data=False)
    value = next((p.value for p in model.metadata_props if p.key == WEIGHT_LEVELS_KEY), None)
    return int(value) if value else None


def reranged_weights(path: Path, levels: int) -> dict[str, np.ndarray]:
    """The initializers that fit the graph at `path` to +-levels (empty where its weights already do)."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(path), load_external_data=False)  # the graph alone: its weights are read below, if need be
    built = built_levels(path, model)
    if built is None or built <= levels:
        return {}
    initializers = {init.name: init for init in model.graph.initializer}
    base = str(Path(path).parent)
    overrides: dict[str, np.ndarray] = {}
    for node in model.graph.node:
        if node.op_type not in WEIGHT_INPUTS:
            continue
        weight, scale = (node.input[i] for i in WEIGHT_INPUTS[node.op_type])
        if weight in overrides or weight not in initializers or scale not in initializers:
            continue
        values = numpy_helper.to_array(initializers[weight], base_dir=base)
        scales = numpy_helper.to_array(initializers[scale], base_dir=base)
        overrides[weight], overrides[scale] = rerange(values, scales, levels, built)
    return overrides
