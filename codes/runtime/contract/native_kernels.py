"""Our CPU kernels in a quantized backbone: where they run, and the graph they run in.

ONNX Runtime runs a quantized step's GEMMs at the integer rate but its attention in fp32, and the per-token
quantization around each GEMM as eight small ops and four passes over the activations (bench/roofline_*.md).
The library built from codes/runtime/native/ (`make setup`) holds ops for both, registered in one domain:
the attention (fused_attention.py) and the per-token quantization with what it follows (fused_quantization.py),
and the codec's Snake activation (fused_snake.py).
They are not in the build: a build stays what every ONNX Runtime runs (the JavaScript runtime, other CPUs,
CUDA), and the runtime swaps the ops in at load, in memory, where the graph is quantized anyway, the host has
the instruction sets and the library is built (docs/DESIGN.md §native-kernels). Torch-free: runtime code.
"""

from __future__ import annotations

import os
from pathlib import Path

from codes.common.errors import UserError
from codes.common.isa import is_x86, native_kernel_lanes

LIBRARY = Path(__file__).resolve().parents[1] / "native" / "libomnivoice_kernels.so"
DOMAIN = "ai.omnivoice"
# OMNIVOICE_ONNX_KERNELS=onnx keeps ONNX Runtime's own ops (to compare, or to rule ours out); =avx2 runs ours at
# 8 lanes, as an AVX2-only CPU does (ONNX Runtime's attention), on any CPU (the library reads it too)
SWITCH, KEEP, EIGHT_LANES = "OMNIVOICE_ONNX_KERNELS", "onnx", "avx2"
SWITCH_VALUES = {KEEP: "ONNX Runtime's own ops", EIGHT_LANES: "our kernels' AVX2 loops, ONNX Runtime's attention"}
PRECISIONS = ("int8", "int4")  # backbones already below fp32; cpu_fp32 stays token for token with upstream


def switch() -> str | None:
    """What OMNIVOICE_ONNX_KERNELS asks for: KEEP, EIGHT_LANES, or None (the widest this CPU runs)."""
    asked = os.environ.get(SWITCH) or None
    if asked not in (None, *SWITCH_VALUES):
        choices = " or ".join(f"{value} ({meaning})" for value, meaning in SWITCH_VALUES.items())
        raise UserError(f"{SWITCH}={asked} is not a choice: use {choices}, or leave it unset (the widest this CPU runs)")
    return asked


def lanes_here(flags: frozenset[str] | None = None) -> int:
    """The vector width our kernels run at here, as the library chooses it: 16 (the attention too), 8 (the row
    quantizers and Snake, beside ONNX Runtime's attention), 0 (none)."""
    asked = switch()
    lanes = native_kernel_lanes(flags) if is_x86() and asked != KEEP else 0
    return min(lanes, 8) if asked == EIGHT_LANES else lanes


def kernels_label(lanes: int) -> str:
    """How a session and the fidelity report name whose ops ran what ours can: ours, ours-avx2 or onnx."""
    return {16: "ours", 8: "ours-avx2"}.get(lanes, "onnx")


def why_not(precision: str | None, flags: frozenset[str] | None = None, library: Path = LIBRARY) -> str | None:
    """None where a backbone of this precision runs our kernels here; else why not, in a few words."""
    if switch() == KEEP:
        return f"{SWITCH}={KEEP}"
    if precision not in PRECISIONS:
        return f"a {precision} backbone keeps ONNX Runtime's ops"
    return why_not_here(flags, library)


def why_not_here(flags: frozenset[str] | None = None, library: Path = LIBRARY) -> str | None:
    """None where this host runs our kernels, at either width; else why not. The codec's Snake asks only this: it
    makes no codes, and its audio moves by about 1e-7."""
    if switch() == KEEP:
        return f"{SWITCH}={KEEP}"
    if lanes_here(flags) == 0:
        return "this CPU lacks AVX2 and FMA"
    if not library.is_file():
        return f"{library.name} is not built (make setup builds it)"
    return None


def use_domain(model) -> None:
    """Declare the library's domain in `model` (an onnx.ModelProto), once."""
    from onnx import helper

    if not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, 1))
