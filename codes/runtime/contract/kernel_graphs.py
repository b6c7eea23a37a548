"""The graphs our kernels run in, made from a build's graphs and kept in the user's cache.

native_kernels.py decides where our ops run; this module makes the graph they run in: a quantized backbone with
the attention and the row quantizers swapped (fused_attention.py, fused_quantization.py), a codec decoder with
its Snake swapped (fused_snake.py), an fp16 decoder widened to fp32 first. Each is made once and kept, named by
what made it: a load that finds it imports no onnx, whose import alone takes about a second
(docs/DESIGN.md §native-kernels). Torch-free: runtime code.
"""

from __future__ import annotations

from pathlib import Path

from codes.common.cache import cache_dir
from codes.common.fileio import atomic_path, known_sha256

WIDENED = "codec-fp32"  # the cache's folder of fp16 codec graphs widened to fp32, our Snake in
REWRITTEN = "kernel-graphs"  # the cache's folder of graphs with our ops in (their weights stay in the build)
# the modules whose code makes what those folders keep: a change to any makes them anew
_REWRITERS = ("kernel_graphs.py", "graph_edit.py", "fused_attention.py", "fused_quantization.py", "fused_snake.py")


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
