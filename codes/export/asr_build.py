"""Export a Whisper checkpoint into `<output>/asr/`: the recogniser `codes/runtime/recognition/asr.py` runs.

The graphs come from onnxruntime-genai's model builder (its Whisper support: an encoder that
also emits each decoder layer's cross-attention keys and values, and a decoder with a self-
attention cache). genai's own search cannot be used: it has no suppressed or begin-suppressed
tokens and stops beams differently from transformers, so the runtime drives the two graphs with
ONNX Runtime and does transformers' beam search in numpy. Everything that search needs is read
here, once, through transformers' own code (the ASR pipeline's defaults, Whisper's init-token
rules, the tokenizer's special ids), and written to `asr/asr_manifest.json`.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from codes.common.errors import UserError
from codes.common.fileio import sha256_file
from codes.common.quiet import library_output
from codes.export.checkpoint import _resolve_hub, identity_of
from codes.export.onnx_io import save_model
from codes.export.tokenizer_build import write_json
from codes.export.whisper_checkpoint import GENERATED, generated_whisper
from codes.runtime.contract.specs import ALIGNER_DIR, ASR_DIR
from codes.runtime.recognition.asr import ALIGNMENT_OUTPUT, FORMAT, MANIFEST_NAME

DEFAULT_ASR_MODEL = "openai/whisper-large-v3-turbo"
PRECISIONS = ("fp32", "fp16", "int8")
GRAPH_FILES = ("encoder.onnx", "decoder.onnx")
OTHER_FILES = ("tokenizer.json", "mel_filters.npy")
CHECKPOINT_FILES = ("config.json", "generation_config.json", "preprocessor_config.json", "tokenizer.json")
# Generation settings the numpy search does not implement, with the value that means "off".
UNSUPPORTED_WHEN_SET = {
    "do_sample": False, "num_return_sequences": 1, "return_timestamps": False, "no_speech_threshold": None,
    "logprob_threshold": None, "compression_ratio_threshold": None, "condition_on_prev_tokens": None,
    "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "min_length": 0, "min_new_tokens": None,
    "bad_words_ids": None, "forced_bos_token_id": None, "forced_eos_token_id": None, "num_beam_groups": 1,
    "prompt_ids": None, "exponential_decay_length_penalty": None, "sequence_bias": None,
}


def resolve_whisper(model: str) -> Path:
    """--asr-model as a checked local folder: a folder, a hub id in the local cache, or a generated one."""
    if model in GENERATED:
        path = generated_whisper(model)
    elif Path(model).exists():
        path = Path(model)
    elif model.count("/") == 1 and not model.startswith((".", "/")):
        path = _resolve_hub(model, "--asr-model")
    else:
        raise UserError(f"--asr-model {model}: no such folder; pass a Whisper checkpoint folder, a cached hub id "
                        f"or one of {', '.join(GENERATED)}")
    if not path.is_dir():
        raise UserError(f"--asr-model {model} is a file; pass the checkpoint folder that holds config.json")
    config = path / "config.json"
    model_type = json.loads(config.read_text()).get("model_type") if config.is_file() else "whisper"
    if model_type != "whisper":
        raise UserError(f"{config} has model_type {model_type!r}, not 'whisper'; pass a Whisper checkpoint")
    missing = [name for name in CHECKPOINT_FILES if not (path / name).is_file()]
    if not (path / "model.safetensors").is_file() and not (path / "model.safetensors.index.json").is_file():
        missing.append("model.safetensors")
    if missing:
        raise UserError(f"Whisper checkpoint {path} is incomplete: missing {', '.join(missing)}; pass a folder in "
                        "the hub's layout (config.json, model.safetensors, generation_config.json, "
                        "preprocessor_config.json, tokenizer.json)")
    return path


def pipeline_generation(folder: Path) -> tuple[dict, dict]:
    """The generation settings and text rules upstream's `pipeline("automatic-speech-recognition")` call
    ends up with, read through transformers' own code rather than restated."""
    import numpy as np
    import torch
    from transformers import pipeline
    from transformers.models.whisper.tokenization_whisper import LANGUAGES

    with library_output("loading the Whisper checkpoint"):
        # The call upstream makes (load_asr_model), on CPU.
        asr = pipeline("automatic-speech-recognition", model=str(folder), dtype=torch.float32, device="cpu")
        model = asr.model
        kwargs = asr._prepare_generate_kwargs({})
        config, _ = model._prepare_generation_config(None, **kwargs)
        model._set_return_timestamps(return_timestamps=None, is_shortform=True, generation_config=config)
        model._set_language_and_task(language=None, task=None, is_multilingual=None, generation_config=config)
        # Language detection runs per clip: mark its slot instead of running it.
        model.detect_language = lambda **_: torch.tensor([-1])
        init = model._retrieve_init_tokens(torch.zeros(1, model.config.num_mel_bins, 3000), batch_size=1,
                                           generation_config=config, config=model.config, num_segment_frames=3000,
                                           kwargs={})[0].tolist()
        tokenizer = asr.tokenizer
        probe = tokenizer.encode(" a . b", add_special_tokens=False)
        # transformers 5 skips the clean-up for BPE tokenizers whatever the config says (and warns): probe it.
        cleans_up = tokenizer.decode(probe) != tokenizer.backend_tokenizer.decode(probe)
    for name, off in UNSUPPORTED_WHEN_SET.items():
        value = getattr(config, name, off)
        if value not in (off, None) and not (off is None and value is False):
            raise UserError(f"{folder}'s generation config sets {name}={value!r}, which the ONNX recogniser does not "
                            "implement; remove it from generation_config.json")
    if isinstance(config.temperature, (list, tuple)):
        raise UserError(f"{folder}'s generation config sets a temperature fallback list; remove temperature")
    lang_ids = sorted(getattr(config, "lang_to_id", {}).values())
    generation = {
        "init_tokens": [None if token == -1 else token for token in init],
        "language_ids": lang_ids,
        "decoder_start_token_id": config.decoder_start_token_id,
        "eos_token_id": config.eos_token_id if isinstance(config.eos_token_id, int) else config.eos_token_id[0],
        "pad_token_id": kwargs.get("pad_token_id", config.pad_token_id),
        "num_beams": int(config.num_beams or 1),
        "length_penalty": float(config.length_penalty),
        "early_stopping": config.early_stopping,
        "max_length": config.max_length,
        "max_new_tokens": config.max_new_tokens,
        "suppress_tokens": list(config.suppress_tokens or []),
        "begin_suppress_tokens": list(config.begin_suppress_tokens or []),
        "pipeline_defaults": kwargs,
    }
    if isinstance(config.eos_token_id, list) and len(config.eos_token_id) > 1:
        raise UserError(f"{folder}'s generation config has several eos_token_id; the recogniser supports one")
    id_of = tokenizer.convert_tokens_to_ids
    special_ids = sorted(set(tokenizer.all_special_ids))
    text = {
        "special_ids": special_ids,
        "language_names": {str(i): LANGUAGES[tokenizer.decode([i])[2:-2]] for i in special_ids
                           if tokenizer.decode([i])[2:-2] in LANGUAGES},
        "timestamp_begin": id_of("<|notimestamps|>") + 1,
        "prompt_token_id": id_of("<|startofprev|>"),
        "decoder_start_token_id": id_of("<|startoftranscript|>"),
        "clean_up_tokenization_spaces": cleans_up,
    }
    mel_filters = np.asarray(asr.feature_extractor.mel_filters, np.float32)
    del asr, model
    return {"generation": generation, "text": text}, {"mel_filters": mel_filters}


@contextmanager
def cross_cache_per_decoder_layer(builder, decoder_layers: int):
    """genai 0.18's Whisper encoder emits one cross-attention cache per *encoder* layer, reading
    decoder layer i for each: right for large-v3 (32/32), an IndexError for turbo (32/4). While
    it lays out those outputs, its layer count is the decoder's."""
    # builder.py imports its builders as a top-level `builders` package: patch that copy.
    WhisperEncoder = sys.modules[builder.WhisperModel.__module__].WhisperEncoder
    originals = {name: getattr(WhisperEncoder, name) for name in ("make_inputs_and_outputs", "make_postprocessing_nodes")}

    def with_decoder_layers(method):
        def patched(self):
            encoder_layers, self.num_layers = self.num_layers, decoder_layers
            try:
                return method(self)
            finally:
                self.num_layers = encoder_layers
        return patched

    for name, method in originals.items():
        setattr(WhisperEncoder, name, with_decoder_layers(method))
    try:
        yield
    finally:
        for name, method in originals.items():
            setattr(WhisperEncoder, name, method)


def build_genai_whisper(folder: Path, out_dir: Path, precision: str) -> tuple[Path, Path]:
    """genai's builder on the checkpoint; returns its encoder.onnx and decoder.onnx."""
    from onnxruntime_genai.models import builder

    config = json.loads((folder / "config.json").read_text())
    if config["encoder_attention_heads"] != config["decoder_attention_heads"]:
        raise UserError(f"{folder}: encoder and decoder head counts differ; genai's Whisper builder cannot export it")
    args = ("openai/whisper-large-v3-turbo", str(folder), str(out_dir), precision, "cpu", str(out_dir / "cache"))
    with library_output("onnxruntime-genai's Whisper builder"), cross_cache_per_decoder_layer(builder, config["decoder_layers"]):
        # create_model needs parse_extra_options first (docs/DESIGN.md §genai-options).
        builder.create_model(*args, **builder.parse_extra_options(*args, []))
    return out_dir / "encoder.onnx", out_dir / "decoder.onnx"


def restore_attention_bias(graph):
    """Give every packed `Attention` node a bias input: genai 0.18 leaves it out when the checkpoint's
    q/k/v biases are all zero, and ONNX Runtime's CPU Attention kernel then segfaults (docs/DESIGN.md
    §recogniser-bias). A zero bias is what the checkpoint says, so the graph computes the same."""
    import numpy as np
    from onnx import helper, numpy_helper

    weights = {tensor.name: tensor for tensor in graph.graph.initializer}
    for node in graph.graph.node:
        if node.op_type != "Attention" or node.domain != "com.microsoft":
            continue
        if len(node.input) > 2 and node.input[2]:
            continue
        sizes = next(helper.get_attribute_value(a) for a in node.attribute if a.name == "qkv_hidden_sizes")
        dtype = helper.tensor_dtype_to_np_dtype(weights[node.input[1]].data_type)
        name = f"{node.name.strip('/').replace('/', '.')}.zero_bias"
        graph.graph.initializer.append(numpy_helper.from_array(np.zeros(sum(sizes), dtype), name))
        while len(node.input) < 3:
            node.input.append("")
        node.input[2] = name
    return graph


def parse_heads(text: str) -> list[list[int]]:
    """--aligner-heads "LAYER:HEAD,LAYER:HEAD,...": alignment heads as [layer, head] pairs."""
    try:
        pairs = [[int(n) for n in pair.split(":")] for pair in text.replace(" ", "").split(",") if pair]
    except ValueError:
        pairs = []
    if not pairs or any(len(pair) != 2 for pair in pairs):
        raise UserError(f"--aligner-heads {text!r}: give LAYER:HEAD pairs, comma-separated (e.g. 3:1,4:2,4:3)")
    return pairs


def alignment_heads(folder: Path, config: dict, given: list[list[int]] | None = None,
                    required: bool = False) -> tuple[list[list[int]], str]:
    """The decoder's alignment heads as sorted [layer, head] pairs, and where they came from: `given`
    (--aligner-heads), else the checkpoint's generation_config.alignment_heads, else openai-whisper's
    default (every head of the last half of the decoder layers, what `Whisper.__init__` sets before
    `set_alignment_heads`), which an aligner refuses (`required`): its heads are what it times words by."""
    layers, heads = config["decoder_layers"], config["decoder_attention_heads"]
    source = "--aligner-heads" if given else "generation_config"
    given = given or json.loads((folder / "generation_config.json").read_text()).get("alignment_heads")
    if not given and required:
        raise UserError(f"{folder} has no alignment heads (generation_config.json alignment_heads); pass "
                        "--aligner-heads LAYER:HEAD,... (openai-whisper's whisper/__init__.py lists each model's)")
    if not given:
        return [[layer, head] for layer in range(layers // 2, layers) for head in range(heads)], "default"
    pairs = sorted({(int(layer), int(head)) for layer, head in given})
    bad = [pair for pair in pairs if not (0 <= pair[0] < layers and 0 <= pair[1] < heads)]
    if bad:
        raise UserError(f"{source}: alignment head {list(bad[0])} of {folder} is outside the decoder's "
                        f"{layers} layers of {heads} heads; fix the heads")
    return [list(pair) for pair in pairs], source


def add_alignment_output(graph, heads: list[list[int]], head_size: int):
    """Give genai's decoder graph one more output, `alignment_qk` [batch, len(heads), tokens, frames]
    (float32): each alignment head's cross-attention logits before the softmax, as openai-whisper's
    `qkv_attention` makes them ((q * d^-1/4) @ (k * d^-1/4)^T). Fed a whole token sequence with an empty
    self-attention cache, the decoder then returns what word alignment reads (docs/DESIGN.md §word-timings)."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    nodes = graph.graph.node
    weights = {tensor.name: tensor for tensor in graph.graph.initializer}
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)
    added, pieces = [], []
    for layer, layer_heads in sorted(by_layer.items()):
        cross = next((n for n in nodes if n.op_type == "MultiHeadAttention" and len(n.input) > 1
                      and n.input[1] == f"past_key_cross_{layer}"), None)
        if cross is None:
            raise UserError(f"genai's decoder graph has no cross-attention over past_key_cross_{layer}; "
                            "this toolkit builds with onnxruntime-genai 0.18")
        num_heads = next(helper.get_attribute_value(a) for a in cross.attribute if a.name == "num_heads")
        # the query's dtype is the graph's: that of the cross-attention's output projection weight
        out_proj = next(n for n in nodes if cross.output[0] in n.input)
        dtype = helper.tensor_dtype_to_np_dtype(weights[out_proj.input[1]].data_type)
        prefix = f"/alignment/layers.{layer}"

        def const(suffix, array, prefix=prefix):
            graph.graph.initializer.append(numpy_helper.from_array(np.asarray(array), f"{prefix}/{suffix}"))
            return f"{prefix}/{suffix}"

        def node(op, inputs, prefix=prefix, **attrs):
            output = f"{prefix}/{op}_{len(added)}"
            added.append(helper.make_node(op, inputs, [output], name=output, **attrs))
            return output

        chosen = const("heads", np.array(layer_heads, np.int64))
        scale = const("scale", np.array(head_size**-0.25, dtype))
        split = node("Reshape", [cross.input[0], const("shape", np.array([0, 0, num_heads, head_size], np.int64))])
        query = node("Gather", [node("Transpose", [split], perm=[0, 2, 1, 3]), chosen], axis=1)  # [B, h, T, d]
        key = node("Gather", [cross.input[1], chosen], axis=1)  # [B, h, S, d]
        key_t = node("Transpose", [node("Mul", [key, scale])], perm=[0, 1, 3, 2])
        pieces.append(node("MatMul", [node("Mul", [query, scale]), key_t]))
    if len(pieces) > 1:
        added.append(helper.make_node("Concat", pieces, ["/alignment/Concat"], name="/alignment/Concat", axis=1))
        pieces = ["/alignment/Concat"]
    added.append(helper.make_node("Cast", pieces, [ALIGNMENT_OUTPUT], name="/alignment/Cast", to=TensorProto.FLOAT))
    nodes.extend(added)
    graph.graph.output.append(helper.make_tensor_value_info(
        ALIGNMENT_OUTPUT, TensorProto.FLOAT, ["batch_size", len(heads), "sequence_length", "encode_sequence_length"]))
    return graph


def _entry(folder: Path, name: str) -> dict:
    entry = {"file": name, "sha256": sha256_file(folder / name)}
    data = folder / f"{name}.data"
    if data.is_file():
        entry.update(data=data.name, data_sha256=sha256_file(data))
    return entry


def build_asr(model: str, output: Path, precision: str = "fp32", work_dir: Path | None = None,
              folder_name: str = ASR_DIR, heads: list[list[int]] | None = None) -> Path:
    """Write `<output>/asr/` (two graphs, tokenizer.json, mel filters, asr_manifest.json); returns the folder.
    folder_name ALIGNER_DIR: the same for an aligner, whose alignment heads must be known (`heads`, or the
    checkpoint's)."""
    import numpy as np
    import onnx

    from codes.export.int8 import quantize_graph
    from codes.export.profiles import INT8

    if precision not in PRECISIONS:
        raise UserError(f"ASR precision {precision!r} is not one of {', '.join(PRECISIONS)}")
    folder = resolve_whisper(model)
    settings, arrays = pipeline_generation(folder)
    asr_dir = Path(output) / folder_name
    work = Path(work_dir) if work_dir else Path(output) / ".asr-work"
    shutil.rmtree(work, ignore_errors=True)
    asr_dir.mkdir(parents=True, exist_ok=True)
    # int8 quantizes the fp32 graphs' MatMuls by the backbone's scheme, uncalibrated (no outlier split).
    genai_precision = "fp16" if precision == "fp16" else "fp32"
    encoder, decoder = build_genai_whisper(folder, work / "genai", genai_precision)
    config = json.loads((folder / "config.json").read_text())
    heads, heads_from = alignment_heads(folder, config, heads, required=folder_name == ALIGNER_DIR)
    head_size = config["d_model"] // config["decoder_attention_heads"]
    for name, source in zip(GRAPH_FILES, (encoder, decoder)):
        graph = restore_attention_bias(onnx.load(str(source)))
        if name == "decoder.onnx":
            graph = add_alignment_output(graph, heads, head_size)
        if precision == "int8":
            graph = quantize_graph(graph, dataclasses.replace(INT8, outlier_ratio=None, smooth_alpha=None))
        save_model(graph, asr_dir / name)
    shutil.copyfile(folder / "tokenizer.json", asr_dir / "tokenizer.json")
    np.save(asr_dir / "mel_filters.npy", arrays["mel_filters"])
    shutil.rmtree(work, ignore_errors=True)

    features = json.loads((folder / "preprocessor_config.json").read_text())
    manifest = {
        "format": FORMAT,
        "version": 1,
        "precision": precision,
        "io_dtype": "float16" if precision == "fp16" else "float32",
        "source": {**identity_of(folder), "asr_model": model},
        "graphs": {"encoder": _entry(asr_dir, "encoder.onnx"), "decoder": _entry(asr_dir, "decoder.onnx")},
        "files": {"tokenizer": _entry(asr_dir, "tokenizer.json"), "mel_filters": _entry(asr_dir, "mel_filters.npy")},
        "model": {
            "decoder_layers": config["decoder_layers"], "decoder_heads": config["decoder_attention_heads"],
            "head_size": config["d_model"] // config["decoder_attention_heads"],
            "max_source_positions": config["max_source_positions"],
            "max_target_positions": config["max_target_positions"], "num_mel_bins": config["num_mel_bins"],
            "vocab_size": config["vocab_size"],
        },
        "features": {key: features[key] for key in ("sampling_rate", "n_fft", "hop_length", "n_samples",
                                                     "nb_max_frames", "feature_size")},
        # word timings: the decoder's extra output, its heads (their order) and where they came from
        "alignment": {"graph": "decoder", "output": ALIGNMENT_OUTPUT, "heads": heads, "heads_from": heads_from,
                      "no_timestamps_token_id": settings["text"]["timestamp_begin"] - 1},
        **settings,
    }
    if features.get("dither", 0.0):
        raise UserError(f"{folder}/preprocessor_config.json sets dither; the recogniser's features are deterministic")
    write_json(asr_dir / MANIFEST_NAME, manifest)
    return asr_dir


# The probe's child: one window through the recogniser's graphs, on every core (turbo's encoder window took
# 73 s on one Zen 1 core); a UserError is its last stderr line.
PROBE_SCRIPT = ("import sys\n"
                "from codes.common.errors import run_cli\n"
                "from codes.runtime.recognition.asr import Recogniser\n"
                "sys.exit(run_cli(lambda: Recogniser(sys.argv[1], sys.argv[2], check_hashes=False).probe()))\n")
WHO = {ASR_DIR: ("the recogniser", "--asr-precision"), ALIGNER_DIR: ("the aligner", "--aligner-precision")}


def probe_recogniser(asr_dir: Path, model: str, provider: str = "cpu") -> None:
    """Run one window through the built graphs in a child process, so a kernel that crashes (a
    segfault kills the process, docs/DESIGN.md §recogniser-bias) becomes one UserError line here."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH"))))}
    result = subprocess.run([sys.executable, "-c", PROBE_SCRIPT, str(Path(asr_dir).resolve()), provider],
                            capture_output=True, text=True, env=env)
    if result.returncode == 0:
        return
    if result.returncode < 0:
        how = f"crashed ONNX Runtime ({signal.Signals(-result.returncode).name})"
    else:
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        how = "failed: " + (lines[-1].removeprefix("error: ") if lines else f"exit {result.returncode}")
    who, flag = WHO[Path(asr_dir).name]
    raise UserError(f"{who} built from {model} {how} on a first window, so nothing was installed; "
                    f"try another {flag}, or report the checkpoint")


def planned_files(folder_name: str = ASR_DIR) -> list[str]:
    """What a recogniser (or aligner) build may write, relative to the build folder (before building: for
    refusing early)."""
    names = [n for graph in GRAPH_FILES for n in (graph, f"{graph}.data")] + list(OTHER_FILES) + [MANIFEST_NAME]
    return [f"{folder_name}/{name}" for name in names]


def written_files(asr_dir: Path) -> list[str]:
    """What a recogniser (or aligner) build wrote, relative to the build folder (for the main build's file list)."""
    manifest = json.loads((Path(asr_dir) / MANIFEST_NAME).read_text())
    names = [name for entry in (*manifest["graphs"].values(), *manifest["files"].values())
             for name in (entry["file"], entry.get("data")) if name]
    folder_name = Path(asr_dir).name
    return [f"{folder_name}/{name}" for name in names] + [f"{folder_name}/{MANIFEST_NAME}"]


def manifest_section(asr_dir: Path) -> dict:
    """The main manifest's `asr` (or `aligner`) entry: where the folder is and what it is."""
    asr_dir = Path(asr_dir)
    manifest = json.loads((asr_dir / MANIFEST_NAME).read_text())
    return {"models_dir": asr_dir.name, "manifest": MANIFEST_NAME,
            "manifest_sha256": sha256_file(asr_dir / MANIFEST_NAME), "precision": manifest["precision"],
            "source": manifest["source"], "heads": manifest.get("alignment", {}).get("heads")}


# The recogniser's precision per build profile (bench/asr_results.md): int8 on every CPU profile but the
# reference one, fp16 on CUDA as upstream runs Whisper there.
PROFILE_PRECISION = {"cpu": "int8", "cpu_int8": "int8", "cpu_fp16": "int8", "cpu_fp32": "fp32", "gpu": "fp16",
                     "web": "int8"}  # web: for the Python runtime; the JavaScript one has no recogniser


def profile_precision(profile: str, override: str | None = None) -> str:
    if override is not None:
        if override not in PRECISIONS:
            raise UserError(f"--asr-precision {override} is not one of {', '.join(PRECISIONS)}")
        return override
    if profile not in PROFILE_PRECISION:
        raise UserError(f"profile {profile!r} has no recogniser precision; pass --asr-precision")
    return PROFILE_PRECISION[profile]
