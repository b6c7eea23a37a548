"""Build profiles: the one place that decides each graph's precision and how it is made.

A profile names a precision per part (embeddings, llm, heads, codec); `recipe()` turns
a part's precision into what its builder runs: Olive passes after the conversion, a
graph transform, or the genai builder's precision and a later int8 pass. The builders
only read recipes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field

from codes.common.errors import UserError
from codes.export.int8 import Int8Scheme

PARTS = ("embeddings", "llm", "heads", "scoring", "codec")
PRECISIONS = ("fp32", "fp16", "int8", "int4")
CODEC_PRECISIONS = ("fp16", "fp32")  # the codec is never quantized to integers

# Small blocks keep int4 argmax choices close to fp32 (docs/DESIGN.md §precision); the heads and
# embeddings are a few percent of the compute, so the finer scales cost nothing measurable.
INT4_BLOCK_SIZE = 32


# cpu_int8's scheme, measured against the others on weights with outlier channels and massive activations
# (bench/quant_results.md): per-column weights, per-token activations, outlier channels in fp32.
INT8 = Int8Scheme()


@dataclass(frozen=True)
class GraphRecipe:
    """How one graph gets its precision; `precision` is what the manifest records."""

    precision: str
    olive_passes: dict = field(default_factory=dict)  # Olive passes after OnnxConversion
    transform: Callable | None = None  # applied to the converted graph (onnx.ModelProto -> ModelProto)
    genai_precision: str | None = None  # the genai builder's precision (backbone only)
    int8: Int8Scheme | None = None  # int8 graphs: the scheme, which the build binds to its calibration as `transform`
    # The genai backbone's GroupQueryAttention rewritten in standard ops (codes/export/web_attention.py): the
    # form onnxruntime-web's WebGPU backend runs. The build binds the checkpoint's head size.
    standard_attention: bool = False

    def apply(self, model):
        """The recipe's transform of a converted graph (onnx.ModelProto)."""
        if self.int8 is not None and self.transform is None:  # never the float graph under an int8 label
            raise RuntimeError("an int8 recipe reached a builder without its quantization bound (export/build.py)")
        return self.transform(model) if self.transform else model


@dataclass(frozen=True)
class Profile:
    name: str
    precision: dict  # part -> precision
    recipe_precision: str  # the one word the recipe's manifest records for the build
    execution_provider: str  # the ONNX Runtime provider the build is meant for
    genai_target: str  # onnxruntime-genai builder's execution_provider
    llm_export: str  # default backbone path: genai | torch
    description: str
    int8: Int8Scheme = INT8  # how its int8 graphs are quantized
    web: bool = False  # graphs every onnxruntime-web backend runs, and the build is a static site (web_site.py)

    def with_codec(self, precision: str | None) -> Profile:
        """--higgs-precision overrides the codec entry."""
        if precision is None:
            return self
        if precision not in CODEC_PRECISIONS:
            raise UserError(f"--higgs-precision {precision!r}: the codec builds in fp16 or fp32, never int4")
        return dataclasses.replace(self, precision={**self.precision, "codec": precision})

    def recipe(self, part: str, llm_export: str = "genai") -> GraphRecipe:
        if self.web:
            return web_recipe(part, self.precision[part], llm_export)
        return recipe(part, self.precision[part], llm_export, self.int8)

    @property
    def quantized(self) -> bool:
        """Whether any graph of the step is below fp32: such a build reports its fidelity."""
        return any(self.precision[part] != "fp32" for part in ("embeddings", "llm", "heads"))


def _olive_precision_passes(precision: str) -> dict:
    if precision == "fp32":
        return {}
    if precision == "fp16":
        return {"to_fp16": {"type": "OnnxFloatToFloat16", "keep_io_types": True}}
    return {"to_int4": {"type": "OnnxBlockWiseRtnQuantization", "block_size": INT4_BLOCK_SIZE,
                        "is_symmetric": True, "accuracy_level": 4}}


def recipe(part: str, precision: str, llm_export: str = "genai", int8: Int8Scheme = INT8) -> GraphRecipe:
    if part not in PARTS:
        raise ValueError(f"unknown part {part!r}; one of {', '.join(PARTS)}")
    # The decoding step's maths stays fp32 in every build: it compares log-probs and scores.
    allowed = {"codec": CODEC_PRECISIONS, "scoring": ("fp32",)}.get(part, PRECISIONS)
    if precision not in allowed:
        raise UserError(f"{part} precision {precision!r} is not supported")
    if part == "embeddings" and precision == "fp16":
        # Store only the tables in fp16 and cast looked-up rows to fp32: a whole-graph fp16 pass leaves
        # ops ORT's CPU provider has no fp16 kernel for, and it then casts the whole table at load (+600 MB).
        from codes.export.lookup_tables import lookup_tables_to_fp16

        return GraphRecipe(precision, transform=lookup_tables_to_fp16)
    if precision == "int8":
        # Built in fp32, then every MatMul rewritten by the scheme (codes/export/int8.py): the genai builder's
        # own int8 MatMulNBits ran ~10x slower here. Only the backbone is calibrated: the outlier split and
        # SmoothQuant apply to its linear layers alone.
        scheme = int8 if part == "llm" else dataclasses.replace(int8, outlier_ratio=None, smooth_alpha=None)
        return GraphRecipe(precision, genai_precision="fp32" if part == "llm" and llm_export == "genai" else None,
                           int8=scheme)
    if part == "llm" and llm_export == "genai":
        return GraphRecipe(precision, genai_precision=precision)
    return GraphRecipe(precision, olive_passes=_olive_precision_passes(precision))


def web_recipe(part: str, precision: str, llm_export: str = "genai") -> GraphRecipe:
    """The web profile's recipes: forms every onnxruntime-web backend runs (docs/build.md, "The web profile").
    WebGPU without shader-f16 (SwiftShader, many phones) has no fp16 kernels, so fp16 is storage only, cast to
    fp32 as the graph loads; int4 MatMulNBits compute in fp32 (accuracy level 1), as WASM and WebGPU always do,
    so that every backend and the Python runtime give the same numbers; the genai backbone's attention is
    rewritten in standard ops; int8 embeddings are 8-bit GatherBlockQuantized tables (block-wise RTN)."""
    from codes.export.web_graphs import fp16_storage, fp32_compute

    forms = {"codec": CODEC_PRECISIONS, "scoring": ("fp32",), "embeddings": ("fp32", "fp16", "int8", "int4")}
    if precision not in forms.get(part, ("fp32", "fp16", "int4")):
        raise UserError(f"the web profile has no {precision} form for the {part} graph")
    if precision == "int8":
        return GraphRecipe(precision, olive_passes={"to_int8": {
            "type": "OnnxBlockWiseRtnQuantization", "bits": 8, "block_size": INT4_BLOCK_SIZE, "is_symmetric": True}})
    genai = part == "llm" and llm_export == "genai"
    if precision == "fp16":
        if genai:
            raise UserError("the web profile's backbone is int4 or fp32: fp16 would compute in fp16")
        return GraphRecipe(precision, transform=fp16_storage)
    passes = _olive_precision_passes(precision) if not genai else {}
    transform = fp32_compute if precision == "int4" else None
    return GraphRecipe(precision, olive_passes=passes, transform=transform,
                       genai_precision=precision if genai else None, standard_attention=genai)


def codec_graph_recipe(key: str, codec: GraphRecipe) -> GraphRecipe:
    """The codec's quantizer stays fp32 in every build: its nearest-codebook search computes
    |x|^2 - 2 x.e + |e|^2, which cancels badly in fp16, and it holds ~1 M parameters."""
    from codes.runtime.contract.specs import QUANTIZER_ENCODER

    return recipe("codec", "fp32") if key == QUANTIZER_ENCODER.key else codec


def _profile(name, recipe_precision, embeddings, llm, heads, provider, genai_target, description, web=False) -> Profile:
    parts = {"embeddings": embeddings, "llm": llm, "heads": heads, "scoring": "fp32", "codec": "fp16"}
    return Profile(name, parts, recipe_precision,
                   provider, genai_target, "genai", description, web=web)


PROFILES = {
    p.name: p
    for p in (
        _profile("cpu", "int4", "int4", "int4", "int4", "CPUExecutionProvider", "cpu",
                 "int4 everywhere (block-wise RTN), CPU"),
        _profile("cpu_fp16", "fp16", "fp16", "int4", "fp16", "CPUExecutionProvider", "cpu",
                 "int4 backbone, fp16 embeddings and heads, CPU"),
        _profile("gpu", "fp16", "fp16", "fp16", "fp16", "CUDAExecutionProvider", "cuda", "fp16 everywhere, CUDA"),
        _profile("cpu_fp32", "fp32", "fp32", "fp32", "fp32", "CPUExecutionProvider", "cpu",
                 "fp32 reference build, used for equivalence with upstream"),
        # Measured on the full model: fp16 embedding tables (memory-mapped, only looked-up rows resident)
        # instead of int4 raise end-to-end argmax agreement with fp32 from 64% to 93% at the same speed.
        # The heads stay fp32: their logits' top choices are close, and int8 activations there cost
        # 3 points of agreement on plain random weights for about 2% of a step (bench/quant_results.md).
        _profile("cpu_int8", "int8", "fp16", "int8", "fp32", "CPUExecutionProvider", "cpu",
                 "int8 backbone (per-column weights, per-token activations, outlier channels fp32), fp32 heads, "
                 "fp16 embedding tables, CPU"),
        # onnxruntime-web (WASM and WebGPU) and onnxruntime-node; the Python runtime runs it on the CPU provider,
        # the WASM backend's kernels. The build is also a static site (codes/export/web_site.py). Measured on
        # wide-tied (near-tied classes, as trained heads have), first-step argmax agreement with upstream fp32:
        # int4 everywhere 32.2%; fp16-stored heads 66.5% (fp32 heads 67.0%, for 34 MB against 17); then int8
        # embeddings 76.3%, as fp16 tables (76.2%), for 184 MB against int4's 102 MB and fp16's 327 MB.
        _profile("web", "int4", "int8", "int4", "fp16", "CPUExecutionProvider", "cpu",
                 "int4 backbone (attention in standard ops), int8 embeddings, fp16-stored heads and codec computed in "
                 "fp32, for onnxruntime-web (WASM, WebGPU) and Node; the build is a static site", web=True),
    )
}


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        raise UserError(f"unknown profile --device {name!r}; choose one of {', '.join(PROFILES)}") from None
