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

from codes.common.cache import cache_dir
from codes.common.errors import UserError
from codes.common.fileio import atomic_path, known_sha256
from codes.common.isa import is_x86, native_kernel_lanes

LIBRARY = Path(__file__).resolve().parents[1] / "native" / "libomnivoice_kernels.so"
DOMAIN = "ai.omnivoice"
# OMNIVOICE_ONNX_KERNELS=onnx keeps ONNX Runtime's own ops (to compare, or to rule ours out); =avx2 runs ours at
# 8 lanes, as an AVX2-only CPU does (ONNX Runtime's attention), on any CPU (the library reads it too)
SWITCH, KEEP, EIGHT_LANES = "OMNIVOICE_ONNX_KERNELS", "onnx", "avx2"
SWITCH_VALUES = {KEEP: "ONNX Runtime's own ops", EIGHT_LANES: "our kernels' AVX2 loops, ONNX Runtime's attention"}
PRECISIONS = ("int8", "int4")  # backbones already below fp32; cpu_fp32 stays token for token with upstream
WIDENED = "codec-fp32"  # the cache's folder of fp16 codec graphs widened to fp32, our Snake in
REWRITTEN = "kernel-graphs"  # the cache's folder of graphs with our ops in (their weights stay in the build)
# the modules whose code makes what those folders keep: a change to any makes them anew
_REWRITERS = ("native_kernels.py", "graph_edit.py", "fused_attention.py", "fused_quantization.py", "fused_snake.py")


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


def fused_graph(path: Path, head_dim: int, lanes: int = 16) -> bytes | None:
    """The graph at `path` (its weights stay in their files) with our ops in, serialized; None where none of
    them fits it. At 8 lanes the attention stays ONNX Runtime's: our attention kernel needs 16. Made once a
    graph and kept in the user's cache: a load that finds it there imports no onnx (about a second of import)."""
    kept = _cache_file(REWRITTEN, Path(path), f"backbone head_dim={head_dim} lanes={lanes}")
    if kept is not None and kept.is_file():
        return kept.read_bytes() or None
    import onnx

    from codes.runtime.contract import fused_attention, fused_quantization

    model = onnx.load(str(path), load_external_data=False)
    attention = fused_attention.rewrite(model, head_dim) if lanes == 16 else 0
    swapped = attention + fused_quantization.rewrite(model)
    if attention:
        fused_attention.pack(model, head_dim, fused_quantization.row_scales(model))
    made = model.SerializeToString() if swapped else b""
    _keep(kept, made)
    return made or None


def codec_graph(path: Path) -> bytes | Path | None:
    """The codec graph at `path` with our Snake in: serialized, or for an fp16 graph the file of it widened to
    fp32 in the user's cache (made once per source graph: widening takes longer than the decode it saves).
    None where it has no Snake. Either is kept in the cache, as fused_graph's are."""
    path = Path(path)
    widened = _cache_file(WIDENED, path, "widened", with_weights=True)
    if widened is not None and widened.is_file():
        return widened
    kept = _cache_file(REWRITTEN, path, "snake")
    if kept is not None and kept.is_file():
        return kept.read_bytes() or None
    import onnx

    from codes.runtime.contract import fused_snake

    model = onnx.load(str(path), load_external_data=False)
    if not any(i.data_type == onnx.TensorProto.FLOAT16 for i in model.graph.initializer):
        made = model.SerializeToString() if fused_snake.rewrite(model) else b""
        _keep(kept, made)
        return made or None
    model = onnx.load(str(path))  # the weights too: they are widened in memory
    fused_snake.upcast(model)
    if not fused_snake.rewrite(model):
        return None
    if widened is None:  # no cache to keep it in: this session's graph in memory
        return model.SerializeToString()
    try:
        with atomic_path(widened, exclusive=True) as tmp:
            onnx.save(model, str(tmp))
    except FileExistsError:  # another process made it first: the same graph
        pass
    except OSError:
        return model.SerializeToString()
    return widened


def _cache_file(folder: str, path: Path, recipe: str, with_weights: bool = False) -> Path | None:
    """Where the graph at `path`, made into `recipe`, is kept in the user's cache: named by the digests of the
    graph (and of its weights where the kept file holds them), of the code that rewrites graphs (_REWRITERS:
    changed code makes them anew) and by the recipe. None where there is no cache."""
    import hashlib

    sources = [path] + [p for p in (path.with_name(path.name + ".data"),) if with_weights and p.is_file()]
    code = [Path(__file__).with_name(name) for name in _REWRITERS]
    try:
        key = hashlib.sha256(" ".join([*known_sha256(sources + code), recipe]).encode()).hexdigest()
        return cache_dir(folder) / f"{key[:32]}.onnx"
    except OSError:
        return None


def _keep(cached: Path | None, made: bytes) -> None:
    """Write `made` at `cached` whole, once; an empty file says that nothing of ours fits the graph."""
    if cached is None:
        return
    try:
        with atomic_path(cached, exclusive=True) as tmp:
            tmp.write_bytes(made)
    except OSError:  # another process kept the same first (FileExistsError), or no cache to write to
        pass
