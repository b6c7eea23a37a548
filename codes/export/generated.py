"""Random-weight OmniVoice checkpoints in exactly upstream's layout.

`tiny-random` is small enough for tests and the demo; `full-random` has the
real shapes (Qwen3-0.6B backbone, full Higgs codec) for speed benchmarks and
speaks noise; `wide-random` is as wide as the full model with 4 layers, for quantization
benchmarks. All carry the real Qwen3 tokenizer with OmniVoice's tokens.

Random weights have none of the outlier channels a trained transformer carries into its linear
layers (LLM.int8, SmoothQuant), which is what breaks per-tensor int8. The `-outlier` kinds
(`tiny-outlier`, `wide-outlier`, `full-outlier`) give them both kinds a trained model has: outlier
channels (a few hidden channels of every RMSNorm before a linear layer, and a few up_proj rows,
OUTLIER_GAIN times larger) and massive activations (the delimiter tokens every prompt holds carry
MASSIVE_GAIN times the typical magnitude in two of those channels, through every layer; Sun 2024).
docs/DESIGN.md §outliers.

Random heads give every class its own direction, so a class wins by a margin on the logits' own scale and
small errors in the backbone rarely change a decision; scaling the heads changes nothing (the margins and the
errors scale alike). A trained model's heads hold classes that nearly tie (weight-only int8 alone keeps well
under its fp32 argmax), which is what per-token activation error costs. The `-tied` kinds (`tiny-tied`,
`wide-tied`, `full-tied`) give each class TIED_GROUP - 1 near-twins: their head rows are one row plus
TIED_SPREAD of its scale in noise, so within a group the winner is decided by margins that small.

A freshly initialised backbone gives nearly identical hidden states over an
all-MASK target, so decoded codes hardly depend on the text and parity tests
prove little (docs/DESIGN.md §test-weights). The weights are therefore shaped on purpose:
text embeddings with real magnitude, sharper attention through the q/k norm
weights, stronger residual branches, and confident audio heads.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from codes.common.cache import cache_dir
from codes.common.quiet import library_output

GENERATOR_VERSION = 2  # bump whenever the generated weights change (tiny.py or tiny_higgs.py)

SIZES = {
    "tiny": dict(
        hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=16, intermediate_size=128,
    ),
    # Qwen3-0.6B as OmniVoice uses it (docs/DESIGN.md §model-shapes).
    "full": dict(
        hidden_size=1024, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
        head_dim=128, intermediate_size=3072,
    ),
    # The full model's width with 4 layers: quantization behaves as at full size, builds in a minute.
    "wide": dict(
        hidden_size=1024, num_hidden_layers=4, num_attention_heads=16, num_key_value_heads=8,
        head_dim=128, intermediate_size=3072,
    ),
}
CODEC_SIZE = {"wide": "tiny"}  # the quantization benchmarks never decode audio at scale
KINDS = ("random", "outlier", "tied")
GENERATED = tuple(f"{size}-{kind}" for size in SIZES for kind in KINDS)
# Trained Qwen-style models carry hidden channels tens of times the median magnitude (Sun 2024).
OUTLIER_GAIN = 32.0
OUTLIER_HIDDEN_CHANNELS = 4  # per checkpoint: the same channels in every layer, as in trained models
OUTLIER_UP_ROWS = 8  # per layer
# Trained LLMs carry activations 10^3-10^4 times the median at their first and delimiter tokens, in a few
# fixed channels (Sun 2024, "Massive activations"); RMSNorm then hands the linear layers a row ~sqrt(hidden) tall.
MASSIVE_GAIN = 1000.0
MASSIVE_CHANNELS = 2  # of the outlier hidden channels
MASSIVE_TOKENS = ("<|lang_start|>", "<|text_start|>")  # in every conditional prompt
TEXT_VOCAB_SIZE = 151676
HEAD_GAIN = 3.0  # the audio heads' std times sqrt(hidden)
TIED_GROUP = 4  # the -tied kinds: classes in groups of near-twins
TIED_SPREAD = 0.01  # a twin's head row: the group's row plus this much of its scale in noise


def _llm_config(size: str):
    from transformers import Qwen3Config

    return Qwen3Config(
        **SIZES[size],
        vocab_size=TEXT_VOCAB_SIZE,
        max_position_embeddings=40960,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        hidden_act="silu",
    )


# (q/k norm weight, residual gain) per size. A 28-layer stack with the tiny model's sharp settings
# turns chaotic (a 1e-5 input change grows to 1e-2 at the output), which makes fp32 parity and
# quantization agreement meaningless; these keep it near 3x.
SHAPING = {"tiny": (3.0, 1.5), "full": (1.5, 1.0), "wide": (1.5, 1.0)}


def _shape_weights(model, generator, size: str) -> None:
    """Make a random model input-dependent (see module docstring)."""
    import torch

    def normal_(tensor, std):
        tensor.copy_(torch.randn(tensor.shape, generator=generator) * std)

    qk_gain, residual_gain = SHAPING[size]
    hidden = model.config.llm_config.hidden_size
    with torch.no_grad():
        normal_(model.llm.embed_tokens.weight, 1.0)
        normal_(model.audio_embeddings.weight, 1.0)
        for layer in model.llm.layers:
            attn, mlp = layer.self_attn, layer.mlp
            attn.q_norm.weight.fill_(qk_gain)
            attn.k_norm.weight.fill_(qk_gain)
            normal_(attn.o_proj.weight, residual_gain / attn.o_proj.in_features**0.5)
            normal_(mlp.down_proj.weight, residual_gain / mlp.down_proj.in_features**0.5)
        normal_(model.audio_heads.weight, HEAD_GAIN / hidden**0.5)


def _tie_heads(model, generator) -> None:
    """Near-twin classes in the audio heads (see module docstring): each group of TIED_GROUP rows becomes its
    first row plus TIED_SPREAD of the heads' scale in noise."""
    import torch

    with torch.no_grad():
        weight = model.audio_heads.weight
        first = torch.arange(weight.shape[0]) // TIED_GROUP * TIED_GROUP
        noise = torch.randn(weight.shape, generator=generator) * (TIED_SPREAD * float(weight.std()))
        weight.copy_(weight[first] + noise)


def outlier_channels(hidden_size: int, intermediate_size: int, num_layers: int, seed: int) -> tuple[list, list]:
    """The hidden channels (shared by every layer) and each layer's up_proj rows that carry outliers."""
    import numpy as np

    rng = np.random.default_rng(seed + 1)
    hidden = sorted(rng.choice(hidden_size, OUTLIER_HIDDEN_CHANNELS, replace=False).tolist())
    rows = [sorted(rng.choice(intermediate_size, OUTLIER_UP_ROWS, replace=False).tolist()) for _ in range(num_layers)]
    return hidden, rows


def _add_outliers(model, seed: int, massive_token_ids: list[int]) -> None:
    """Give the linear layers' inputs outlier channels and massive activations, as trained weights have
    (see module docstring)."""
    import torch

    llm = model.config.llm_config
    hidden, rows = outlier_channels(llm.hidden_size, llm.intermediate_size, llm.num_hidden_layers, seed)
    with torch.no_grad():
        table = model.llm.embed_tokens.weight
        typical = float(table.abs().median())
        for token in massive_token_ids:
            table[token, hidden[:MASSIVE_CHANNELS]] = MASSIVE_GAIN * typical
        for layer, up_rows in zip(model.llm.layers, rows):
            layer.input_layernorm.weight[hidden] *= OUTLIER_GAIN
            layer.post_attention_layernorm.weight[hidden] *= OUTLIER_GAIN
            layer.mlp.up_proj.weight[up_rows] *= OUTLIER_GAIN


def write_omnivoice_checkpoint(out_dir: Path, size: str = "tiny", seed: int = 0, outliers: bool = False,
                               tied: bool = False) -> Path:
    """Write config.json, model.safetensors, tokenizer files and audio_tokenizer/ into out_dir."""
    import torch
    from omnivoice.models.omnivoice import OmniVoice, OmniVoiceConfig

    from codes.export.generated_higgs import write_higgs_checkpoint
    from codes.export.tokenizer_build import write_tokenizer_files
    from codes.runtime.text.tokenizer import TextTokenizer

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    config = OmniVoiceConfig(llm_config=_llm_config(size).to_dict())
    model = OmniVoice(config).eval()
    _shape_weights(model, torch.Generator().manual_seed(seed), size)
    if tied:
        _tie_heads(model, torch.Generator().manual_seed(seed + 2))
    write_tokenizer_files(out_dir)
    if outliers:
        tokenizer = TextTokenizer.from_dir(out_dir)
        _add_outliers(model, seed, [tokenizer.token_id(token) for token in MASSIVE_TOKENS])
    model.save_pretrained(str(out_dir))
    write_higgs_checkpoint(out_dir / "audio_tokenizer", size=CODEC_SIZE.get(size, size), seed=seed)
    (out_dir / "README.md").write_text(
        f"Random-weight OmniVoice checkpoint ({size}, seed {seed}{', with outlier channels and massive activations' * outliers}"
        f"{', with near-twin classes in its heads' * tied}) made by omnivoice-onnx "
        f"generator v{GENERATOR_VERSION}. It is for tests and benchmarks: it speaks noise.\n"
    )
    return out_dir


def generate_once(final: Path, name: str, write) -> Path:
    """`final`, made by `write(folder)` into a hidden folder beside it and swapped in whole, unless it
    holds a config.json already (a generated checkpoint is made once per cache)."""
    if not (final / "config.json").is_file():
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        tmp.chmod(0o755)
        try:
            with library_output(f"generating {name}"):
                write(tmp)
            try:
                os.rename(tmp, final)
            except OSError:  # another process finished first
                shutil.rmtree(tmp, ignore_errors=True)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    return final


def generated_folder(name: str, seed: int = 0) -> tuple[Path, dict]:
    """One of GENERATED (`tiny-random`, `full-outlier`, ...), generated once into the cache (atomically:
    a folder swap); returns the folder and the checkpoint's identity."""
    size, kind = name.split("-")
    final = cache_dir("checkpoints") / f"{name}-v{GENERATOR_VERSION}-seed{seed}"
    generate_once(final, name, lambda folder: write_omnivoice_checkpoint(folder, size=size, seed=seed,
                                                                        outliers=kind == "outlier", tied=kind == "tied"))
    identity = {"kind": name, "seed": seed, "generator_version": GENERATOR_VERSION, "path": str(final)}
    return final, identity

