"""The Higgs codec build: four graphs in one folder with a manifest of their own.

A codec folder is a build in its own right (its files, hashes, precision and rates in its
own omnivoice_manifest.json), so any backbone build, or --higgs_dir, can point at it.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path

from codes.common.fileio import sha256_file
from codes.common.quiet import library_output
from codes.export.higgs import SEMANTIC_SAMPLE_RATE, feature_dims, load_prepared_higgs
from codes.export.olive_build import olive_export
from codes.export.onnx_io import files_of, graph_io
from codes.export.profiles import GraphRecipe, codec_graph_recipe
from codes.export.submodels import CODEC_GRAPHS
from codes.runtime.contract.specs import CODEBOOK_SIZE, HOP_LENGTH, NUM_CODEBOOKS, SAMPLE_RATE


def graph_float_dtype(model_file: Path) -> str:
    """'float16' if the graph computes in fp16 (its initializers are), else 'float32'."""
    import onnx

    model = onnx.load(str(model_file), load_external_data=False)
    types = {init.data_type for init in model.graph.initializer}
    return "float16" if onnx.TensorProto.FLOAT16 in types else "float32"


def feature_extractor_settings(source_dir) -> dict:
    """What the runtime needs from upstream's preprocessor_config.json, checked."""
    path = Path(source_dir) / "preprocessor_config.json"
    settings = json.loads(path.read_text())
    wanted = {"sampling_rate": SAMPLE_RATE, "hop_length": HOP_LENGTH, "feature_size": 1}
    for name, value in wanted.items():
        if settings.get(name) != value:
            raise ValueError(f"{path}: {name} is {settings.get(name)!r}; the codec runtime needs {value}")
    return {"sampling_rate": SAMPLE_RATE, "hop_length": HOP_LENGTH, "feature_size": 1,
            "padding_value": float(settings.get("padding_value", 0.0))}


def _manifest_tensors(tensors, graph_tensors: list[dict]) -> list[dict]:
    by_name = {t["name"]: t for t in graph_tensors}
    entries = []
    for spec in tensors:
        built = by_name.get(spec.name)
        if built is None:
            raise RuntimeError(f"built graph lacks tensor {spec.name!r} (has {sorted(by_name)})")
        entries.append(spec.to_manifest(built["dtype"]))
    return entries


def build_codec(source_audio_tokenizer_dir, out_dir, codec: GraphRecipe, work_dir=None,
                log=print) -> tuple[dict, list[str]]:
    """Export the four codec graphs into `out_dir`.

    Returns the codec section (what its manifest records) and the files written, relative to out_dir.
    """
    source = Path(source_audio_tokenizer_dir).resolve()
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    with library_output("loading the codec"):
        load_prepared_higgs(str(source))  # validates the codec's layout and rates before any export
    feature_extractor = feature_extractor_settings(source)

    graphs, written = {}, []
    with tempfile.TemporaryDirectory(prefix="higgs_olive_", dir=work_dir) as olive_dir:
        for entry in CODEC_GRAPHS:
            started = time.perf_counter()
            path = olive_export(entry, source, codec_graph_recipe(entry.key, codec), out_dir, Path(olive_dir))
            seconds = time.perf_counter() - started
            graph_inputs, graph_outputs, _ = graph_io(path)
            graphs[entry.key] = {
                "filename": path.name,
                "precision": "fp16" if graph_float_dtype(path) == "float16" else "fp32",
                "inputs": _manifest_tensors(entry.spec.inputs, graph_inputs),
                "outputs": _manifest_tensors(entry.spec.outputs, graph_outputs),
                "sha256": sha256_file(path),
            }
            written += [f.name for f in files_of(path)]
            log(f"  {entry.key}: {graphs[entry.key]['precision']}, {path.stat().st_size / 1e6:.1f} MB, {seconds:.1f} s")

    acoustic_dim, semantic_dim = feature_dims(source)
    section = {
        "precision": codec.precision,
        "sample_rate": SAMPLE_RATE,
        "semantic_sample_rate": SEMANTIC_SAMPLE_RATE,
        "hop_length": HOP_LENGTH,
        "frame_rate": SAMPLE_RATE // HOP_LENGTH,
        "num_codebooks": NUM_CODEBOOKS,
        "codebook_size": CODEBOOK_SIZE,
        "acoustic_dim": acoustic_dim,
        "semantic_dim": semantic_dim,
        "feature_extractor": feature_extractor,
        "sub_models": graphs,
    }
    return section, written
