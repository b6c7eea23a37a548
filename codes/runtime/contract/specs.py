"""One declaration per ONNX sub-model: names, dtypes, symbolic shapes.

The exporters, the dummy inputs, the manifest entries and the runtime's input
checks all read these, so a shape changes in one place. A dtype of "float"
means "the build's float type" (float32 or float16), read back from the graph.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

# Upstream constants (OmniVoiceConfig defaults, Higgs Audio V2 at 25 fps).
NUM_CODEBOOKS = 8
AUDIO_VOCAB_SIZE = 1025
AUDIO_MASK_ID = 1024
CODEBOOK_SIZE = 1024
CODEBOOK_WEIGHTS = (8, 8, 6, 6, 4, 4, 2, 2)
SAMPLE_RATE = 24000
HOP_LENGTH = 960
FRAME_RATE = SAMPLE_RATE // HOP_LENGTH  # 25 frames per second

ONNX_OPSET = 17  # what the torch exporter writes; the genai graph records its own


@dataclass(frozen=True)
class TensorSpec:
    name: str
    dtype: str  # "int64" | "bool" | "float" | "float32"
    shape: tuple  # ints are fixed, strings are symbolic axes

    def dynamic_axes(self) -> dict[int, str]:
        return {i: d for i, d in enumerate(self.shape) if isinstance(d, str)}

    def to_manifest(self, resolved_dtype: str | None = None) -> dict:
        return {"name": self.name, "dtype": resolved_dtype or self.dtype, "shape": list(self.shape)}


@dataclass(frozen=True)
class SubModelSpec:
    key: str
    filename: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]

    @property
    def input_names(self) -> list[str]:
        return [t.name for t in self.inputs]

    @property
    def output_names(self) -> list[str]:
        return [t.name for t in self.outputs]

    def dynamic_axes(self) -> dict[str, dict[int, str]]:
        return {t.name: t.dynamic_axes() for t in (*self.inputs, *self.outputs)}

    def sized(self, hidden_size: int) -> SubModelSpec:
        """The spec with the symbolic "hidden" axis fixed, as a build exports it."""

        def fix(tensor: TensorSpec) -> TensorSpec:
            shape = tuple(hidden_size if d == "hidden" else d for d in tensor.shape)
            return dataclasses.replace(tensor, shape=shape)

        return dataclasses.replace(self, inputs=tuple(map(fix, self.inputs)), outputs=tuple(map(fix, self.outputs)))

    def io_config(self) -> dict:
        """Olive's io_config for a PyTorchModel input."""
        return {
            "input_names": self.input_names,
            "output_names": self.output_names,
            "dynamic_axes": self.dynamic_axes(),
        }


# The backbone's three graphs. "hidden" stands for the checkpoint's width; a build fixes it (sized).
EMBEDDINGS = SubModelSpec(
    key="audio_embeddings_encoder",
    filename="audio_embeddings_encoder.onnx",
    inputs=(
        TensorSpec("input_ids", "int64", ("batch", NUM_CODEBOOKS, "sequence")),
        TensorSpec("audio_mask", "bool", ("batch", "sequence")),
    ),
    outputs=(TensorSpec("inputs_embeds", "float", ("batch", "sequence", "hidden")),),
)
BACKBONE = SubModelSpec(
    key="llm_decoder",
    filename="llm_decoder.onnx",
    inputs=(
        TensorSpec("inputs_embeds", "float", ("batch", "sequence", "hidden")),
        # True where query i may attend to key j; upstream's padded CFG mask.
        TensorSpec("attention_mask", "bool", ("batch", 1, "sequence", "sequence")),
    ),
    outputs=(TensorSpec("hidden_states", "float", ("batch", "sequence", "hidden")),),
)
HEADS = SubModelSpec(
    key="audio_heads_decoder",
    filename="audio_heads_decoder.onnx",
    inputs=(TensorSpec("hidden_states", "float", ("batch", "sequence", "hidden")),),
    outputs=(TensorSpec("logits", "float", ("batch", NUM_CODEBOOKS, "sequence", AUDIO_VOCAB_SIZE)),),
)
BACKBONE_SPECS = (EMBEDDINGS, BACKBONE, HEADS)


# The Higgs Audio V2 codec, split where the ONNX graphs stay length-agnostic.
HIGGS_DIR = "audio_tokenizer"
# The recogniser (Whisper's encoder and decoder, codes/runtime/recognition/asr.py), beside it in a build.
ASR_DIR = "asr"
ASR_MANIFEST_NAME = "asr_manifest.json"  # a recogniser's (or aligner's) folder's own manifest
# The aligner (a Whisper that times words, often a small one: codes/runtime/recognition/aligner.py), beside it in a build.
ALIGNER_DIR = "aligner"

ACOUSTIC_ENCODER = SubModelSpec(
    key="acoustic_encoder",
    filename="acoustic_encoder.onnx",
    inputs=(TensorSpec("waveform", "float32", ("batch", 1, "samples")),),
    outputs=(TensorSpec("acoustic_features", "float32", ("batch", "acoustic_dim", "frames")),),
)
SEMANTIC_ENCODER = SubModelSpec(
    key="semantic_encoder",
    filename="semantic_encoder.onnx",
    inputs=(TensorSpec("waveform", "float32", ("batch", 1, "samples")),),
    outputs=(TensorSpec("semantic_features", "float32", ("batch", "semantic_dim", "frames")),),
)
QUANTIZER_ENCODER = SubModelSpec(
    key="quantizer_encoder",
    filename="quantizer_encoder.onnx",
    inputs=(
        TensorSpec("acoustic_features", "float32", ("batch", "acoustic_dim", "frames")),
        TensorSpec("semantic_features", "float32", ("batch", "semantic_dim", "frames")),
    ),
    outputs=(TensorSpec("audio_codes", "int64", ("batch", NUM_CODEBOOKS, "frames")),),
)
HIGGS_DECODER = SubModelSpec(
    key="higgs_decoder",
    filename="higgs_decoder.onnx",
    inputs=(TensorSpec("audio_codes", "int64", ("batch", NUM_CODEBOOKS, "frames")),),
    outputs=(TensorSpec("waveform", "float32", ("batch", 1, "samples")),),
)
HIGGS_SPECS = (ACOUSTIC_ENCODER, SEMANTIC_ENCODER, QUANTIZER_ENCODER, HIGGS_DECODER)

# The decoding step's maths as graphs (guidance, layer penalty, Gumbel noise, token and score per cell):
# only tokens and scores come back to the host. The host draws each item's noise from that item's own
# generator and passes it in. Settings are per item ([N]), so items with different settings share a call.
_SCORING_INPUTS = (
    # The heads' output as it is: the items' conditional rows, then their unconditional rows.
    TensorSpec("logits", "float32", ("rows", NUM_CODEBOOKS, "target", AUDIO_VOCAB_SIZE)),
    TensorSpec("position_uniform", "float32", ("items", NUM_CODEBOOKS, "target")),
    TensorSpec("guidance_scale", "float32", ("items",)),
    TensorSpec("layer_penalty_factor", "float32", ("items",)),
    TensorSpec("position_temperature", "float32", ("items",)),
)
_SCORING_OUTPUTS = (
    TensorSpec("tokens", "int64", ("items", NUM_CODEBOOKS, "target")),
    TensorSpec("scores", "float32", ("items", NUM_CODEBOOKS, "target")),
)
# class_temperature 0 (upstream's default): tokens are the argmax.
SCORING = SubModelSpec("cell_scoring", "cell_scoring.onnx", _SCORING_INPUTS, _SCORING_OUTPUTS)
# class_temperature > 0: Gumbel sampling among the top 10% of the vocabulary, with its own noise.
SCORING_SAMPLED = SubModelSpec(
    "cell_scoring_sampled", "cell_scoring_sampled.onnx",
    _SCORING_INPUTS + (TensorSpec("class_uniform", "float32", ("items", NUM_CODEBOOKS, "target", AUDIO_VOCAB_SIZE)),
                       TensorSpec("class_temperature", "float32", ("items",))),
    _SCORING_OUTPUTS,
)
SCORING_SPECS = (SCORING, SCORING_SAMPLED)

# Glue between the backbone's graphs, so a step's tensors stay on the execution provider (I/O binding):
# they move and cast, no maths. Each build makes them for its own graphs' types (codes/export/glue.py).
BACKBONE_INPUT = SubModelSpec(
    "backbone_input", "backbone_input.onnx",
    # Built only where the embeddings' output type is not the backbone's input type (the gpu profile).
    inputs=(TensorSpec("inputs_embeds", "float", ("batch", "sequence", "hidden")),),
    outputs=(TensorSpec("backbone_embeds", "float", ("batch", "sequence", "hidden")),),
)
TARGET_WINDOWS = SubModelSpec(
    "target_windows", "target_windows.onnx",
    inputs=(
        TensorSpec("hidden_states", "float", ("items", "sequence", "hidden")),  # the conditional rows
        TensorSpec("target_hidden_states", "float", ("items", "target", "hidden")),  # the unconditional rows
        # Where each target cell sits in its conditional row (padding cells repeat a valid position).
        TensorSpec("window_index", "int64", ("items", "target", 1)),
    ),
    # The heads' input: the items' conditional windows, then their unconditional rows.
    outputs=(TensorSpec("windows", "float", ("rows", "target", "hidden")),),
)
GLUE_SPECS = (BACKBONE_INPUT, TARGET_WINDOWS)
