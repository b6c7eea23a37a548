"""Random-weight Whisper checkpoints in the Hugging Face layout, with the real multilingual vocabulary.

`tiny-whisper` is small enough for tests; `full-whisper` has whisper-large-v3-turbo's shapes
(d_model 1280, 32 encoder and 4 decoder layers, 20 heads, 128 mel bins, 51,866 tokens) for
speed benchmarks. Both carry large-v3's tokenizer (the `multilingual.tiktoken` ranks shipped in
the PyPI package `openai-whisper`, plus its 1,609 special tokens) and a generation config laid
out like turbo's, since the decoding's forced, suppressed and language ids all come from it.

A freshly initialised Whisper gives logits that hardly depend on the audio (the token embedding,
tied to the output projection, is tiny next to the residual stream), so every clip decodes to
the same text. The weights are shaped so the transcript follows the clip (docs/DESIGN.md
§test-weights has the same reasoning for the TTS model).
"""

from __future__ import annotations

import json
from pathlib import Path

from codes.common.cache import cache_dir
from codes.common.errors import UserError
from codes.export.generated import generate_once
from codes.export.tokenizer_build import merge_parts, write_json
from codes.runtime.text.tokenizer import byte_alphabet

GENERATOR_VERSION = 3  # bump whenever the generated weights, config or tokenizer change
GENERATED = ("tiny-whisper", "full-whisper", "base-whisper", "small-whisper")
NUM_LANGUAGES = 100  # large-v3 added Cantonese to v2's 99
BASE_VOCAB_SIZE = 50_257
VOCAB_SIZE = 51_866  # the base ranks, then <|endoftext|> ... <|notimestamps|>, then 1,501 timestamps
PRETOKENIZE_REGEX = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

SIZES = {
    # more encoder than decoder layers, as turbo (the genai builder's cross cache depends on it)
    "tiny": dict(d_model=64, encoder_layers=3, decoder_layers=2, encoder_attention_heads=4,
                 decoder_attention_heads=4, encoder_ffn_dim=128, decoder_ffn_dim=128),
    # whisper-large-v3-turbo's config.json
    "full": dict(d_model=1280, encoder_layers=32, decoder_layers=4, encoder_attention_heads=20,
                 decoder_attention_heads=20, encoder_ffn_dim=5120, decoder_ffn_dim=5120),
    # whisper-base's and whisper-small's shapes (with large-v3's vocabulary and 128 mel bins): the aligner
    # sizes people pick, for bench/words_results.md
    "base": dict(d_model=512, encoder_layers=6, decoder_layers=6, encoder_attention_heads=8,
                 decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048),
    "small": dict(d_model=768, encoder_layers=12, decoder_layers=12, encoder_attention_heads=12,
                  decoder_attention_heads=12, encoder_ffn_dim=3072, decoder_ffn_dim=3072),
}
# The decoder heads word timings read (generation_config.alignment_heads): turbo's, base's and small's for their
# shapes (openai-whisper's _ALIGNMENT_HEADS); for the tiny one, heads in both layers, so the alignment graph
# joins more than one layer.
ALIGNMENT_HEADS = {"tiny": [[0, 2], [1, 0], [1, 3]], "full": [[2, 4], [2, 11], [3, 3], [3, 6], [3, 11], [3, 14]],
                   "base": [[3, 1], [4, 2], [4, 3], [4, 7], [5, 1], [5, 2], [5, 4], [5, 6]],
                   "small": [[5, 3], [5, 9], [8, 0], [8, 4], [8, 7], [8, 8], [9, 0], [9, 7], [9, 9], [10, 5]]}


def _whisper_tokenizer():
    """openai-whisper's own tokenizer for large-v3: the source of every special token id."""
    try:
        from whisper.tokenizer import LANGUAGES, get_tokenizer
    except ModuleNotFoundError:
        raise UserError("package openai-whisper is missing; run: pip install openai-whisper==20250625") from None
    tokenizer = get_tokenizer(multilingual=True, num_languages=NUM_LANGUAGES)
    if tokenizer.encoding.n_vocab != VOCAB_SIZE:
        raise UserError(f"openai-whisper's vocabulary has {tokenizer.encoding.n_vocab} tokens, not {VOCAB_SIZE}; "
                        "run: pip install openai-whisper==20250625")
    return tokenizer, list(LANGUAGES)[:NUM_LANGUAGES]


def special_tokens(tokenizer) -> list[str]:
    """The special tokens in id order from 50257, as openai-whisper adds them after the ranks."""
    encoding = tokenizer.encoding
    return sorted(encoding._special_tokens, key=encoding._special_tokens.__getitem__)


def vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[str]]:
    """Byte-level BPE vocab and rank-ordered merges rebuilt from tiktoken ranks (REFERENCE §5's method)."""
    alphabet = byte_alphabet()

    def as_text(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    vocab = {as_text(token): rank for token, rank in ranks.items()}
    merges = [" ".join(as_text(part) for part in merge_parts(token, rank, ranks))
              for token, rank in sorted(ranks.items(), key=lambda item: item[1]) if len(token) > 1]
    return vocab, merges


def _added_token(token_id: int, content: str, special: bool) -> dict:
    return {"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
            "normalized": False, "special": special}


def tokenizer_files(tokenizer) -> dict[str, dict | str]:
    """tokenizer.json, vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json, like large-v3's.

    The timestamp tokens are added but not special (as in the hub's large-v3 files): the ASR
    pipeline's decoding tells them from the special tokens by id."""
    ranks = tokenizer.encoding._mergeable_ranks
    if len(ranks) != BASE_VOCAB_SIZE:
        raise UserError(f"multilingual.tiktoken has {len(ranks)} ranks, not {BASE_VOCAB_SIZE}; "
                        "run: pip install openai-whisper==20250625")
    vocab, merges = vocab_and_merges(ranks)
    specials = special_tokens(tokenizer)
    timestamp_begin = tokenizer.timestamp_begin
    added = [_added_token(BASE_VOCAB_SIZE + i, content, BASE_VOCAB_SIZE + i < timestamp_begin)
             for i, content in enumerate(specials)]
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer_json = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": byte_level,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|startoftranscript|>", "type_id": 0}},
                                      {"SpecialToken": {"id": "<|notimestamps|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "<|endoftext|>", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<|startoftranscript|>", "type_id": 0}},
                                    {"SpecialToken": {"id": "<|notimestamps|>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}},
                                    {"SpecialToken": {"id": "<|endoftext|>", "type_id": 1}}],
                           "special_tokens": {name: {"id": name, "ids": [tokenizer.encoding._special_tokens[name]],
                                                     "tokens": [name]}
                                              for name in ("<|startoftranscript|>", "<|notimestamps|>",
                                                           "<|endoftext|>")}},
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": vocab, "merges": [merge.split(" ") for merge in merges]},
    }
    keys = ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
    extra_special = [entry["content"] for entry in added if entry["special"]]
    tokenizer_config = {
        "add_prefix_space": False,
        "added_tokens_decoder": {str(entry["id"]): {k: entry[k] for k in keys} for entry in added},
        "additional_special_tokens": extra_special,
        "bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
        "unk_token": "<|endoftext|>",
        "clean_up_tokenization_spaces": True,
        "errors": "replace",
        "model_max_length": 1000000000000000019884624838656,
        "processor_class": "WhisperProcessor",
        "return_attention_mask": False,
        "tokenizer_class": "WhisperTokenizer",
    }
    special_map = {"additional_special_tokens": extra_special, "bos_token": "<|endoftext|>",
                   "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>", "unk_token": "<|endoftext|>"}
    return {
        "tokenizer.json": tokenizer_json,
        "vocab.json": vocab,
        "merges.txt": "#version: 0.2\n" + "\n".join(merges) + "\n",
        "tokenizer_config.json": tokenizer_config,
        "special_tokens_map.json": special_map,
    }


def generation_config(tokenizer, languages: list[str], size: str) -> dict:
    """generation_config.json laid out like whisper-large-v3-turbo's."""
    ids = tokenizer.encoding._special_tokens
    # openai-whisper's "-1" suppression: the non-speech symbols, then the task and prompt tokens.
    suppress = sorted(tokenizer.non_speech_tokens) + sorted(
        [tokenizer.sot, tokenizer.translate, tokenizer.transcribe, tokenizer.sot_lm, tokenizer.sot_prev,
         tokenizer.no_speech])
    return {
        "alignment_heads": ALIGNMENT_HEADS[size],
        "begin_suppress_tokens": [tokenizer.encoding.encode(" ")[0], tokenizer.eot],
        "bos_token_id": tokenizer.eot,
        "decoder_start_token_id": tokenizer.sot,
        "eos_token_id": tokenizer.eot,
        "forced_decoder_ids": [[1, None], [2, tokenizer.transcribe]],
        "is_multilingual": True,
        "lang_to_id": {f"<|{code}|>": ids[f"<|{code}|>"] for code in languages},
        "max_initial_timestamp_index": 50,
        "max_length": 448,
        "no_timestamps_token_id": tokenizer.no_timestamps,
        "pad_token_id": tokenizer.eot,
        "prev_sot_token_id": tokenizer.sot_prev,
        "return_timestamps": False,
        "suppress_tokens": suppress,
        "task_to_id": {"transcribe": tokenizer.transcribe, "translate": tokenizer.translate},
    }


def whisper_config(size: str, tokenizer):
    from transformers import WhisperConfig

    return WhisperConfig(
        vocab_size=VOCAB_SIZE, num_mel_bins=128, max_source_positions=1500, max_target_positions=448,
        decoder_start_token_id=tokenizer.sot, bos_token_id=tokenizer.eot, eos_token_id=tokenizer.eot,
        pad_token_id=tokenizer.eot, begin_suppress_tokens=None, suppress_tokens=None,
        activation_function="gelu", scale_embedding=False, use_cache=True, torch_dtype="float32",
        **SIZES[size],
    )


# Gains measured on tiny-whisper: below them every clip decodes to one repeated token; the
# end-of-text push makes beams finish in tens of tokens rather than running to max_length.
TOKEN_EMBED_NORM = 2.4  # the tied embedding row's norm: larger and the decoder echoes its last token
DECODER_POSITION_STD = 1.0  # learned positions that differ enough to move the next token
CONV_GAIN = 3.0  # the audio, not the sinusoidal positions, dominates the encoder's input
CROSS_QK_GAIN = 3.0  # sharper cross-attention: a position reads a few frames, not the mean of 1500
CROSS_OUT_GAIN = 6.0
EOS_LOGIT_PUSH = 4.5


def _shape_weights(model, generator, zero_qv_biases: bool = False) -> None:
    """Make a random Whisper's transcript depend on the clip (see module docstring). `zero_qv_biases`:
    every attention's query and value biases all zero, the checkpoint on which genai's builder leaves
    the encoder's attention bias out (docs/DESIGN.md §recogniser-bias)."""
    import torch

    def normal_(tensor, std):
        tensor.copy_(torch.randn(tensor.shape, generator=generator) * std)

    encoder, decoder = model.model.encoder, model.model.decoder
    d_model = model.config.d_model
    with torch.no_grad():
        # Real checkpoints have non-zero biases: give every bias a value (zero_qv_biases is the exception).
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.bias is not None:
                normal_(module.bias, 0.02)
        for conv in (encoder.conv1, encoder.conv2):
            normal_(conv.weight, CONV_GAIN / (conv.in_channels * conv.kernel_size[0]) ** 0.5)
        for layer in encoder.layers:
            normal_(layer.self_attn.out_proj.weight, 1.0 / d_model**0.5)
        normal_(decoder.embed_tokens.weight, TOKEN_EMBED_NORM / d_model**0.5)  # tied to proj_out
        normal_(decoder.embed_positions.weight, DECODER_POSITION_STD)
        for layer in decoder.layers:
            cross = layer.encoder_attn
            normal_(cross.q_proj.weight, CROSS_QK_GAIN / d_model**0.5)
            normal_(cross.k_proj.weight, CROSS_QK_GAIN / d_model**0.5)
            normal_(cross.out_proj.weight, CROSS_OUT_GAIN / d_model**0.5)
            normal_(layer.self_attn.out_proj.weight, 1.0 / d_model**0.5)
            normal_(layer.fc2.weight, 1.0 / layer.fc2.in_features**0.5)
        if zero_qv_biases:
            for layer in (*encoder.layers, *decoder.layers):
                for attention in (layer.self_attn, getattr(layer, "encoder_attn", None)):
                    if attention is not None:
                        attention.q_proj.bias.zero_()
                        attention.v_proj.bias.zero_()
        # The final norm's bias adds EOS_LOGIT_PUSH to <|endoftext|>'s logit (the projection is tied).
        eos_row = decoder.embed_tokens.weight[model.config.eos_token_id]
        decoder.layer_norm.bias.copy_(EOS_LOGIT_PUSH * eos_row / eos_row.norm() ** 2)


def write_whisper_checkpoint(out_dir: Path, size: str = "tiny", seed: int = 0, zero_qv_biases: bool = False) -> Path:
    """Write config.json, model.safetensors, generation_config.json, preprocessor_config.json and the
    tokenizer files into out_dir."""
    import torch
    from transformers import WhisperFeatureExtractor, WhisperForConditionalGeneration

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer, languages = _whisper_tokenizer()
    torch.manual_seed(seed)
    model = WhisperForConditionalGeneration(whisper_config(size, tokenizer)).eval()
    _shape_weights(model, torch.Generator().manual_seed(seed), zero_qv_biases)
    model.config.architectures = ["WhisperForConditionalGeneration"]
    model.save_pretrained(str(out_dir))
    (out_dir / "generation_config.json").unlink(missing_ok=True)
    write_json(out_dir / "generation_config.json", generation_config(tokenizer, languages, size))
    WhisperFeatureExtractor(feature_size=128).save_pretrained(str(out_dir))
    for name, content in tokenizer_files(tokenizer).items():
        if isinstance(content, str):
            (out_dir / name).write_text(content, encoding="utf-8")
        else:
            write_json(out_dir / name, content, indent=None if name in ("tokenizer.json", "vocab.json") else 2)
    (out_dir / "README.md").write_text(
        f"Random-weight Whisper checkpoint ({size}, seed {seed}{', zero q/v biases' * zero_qv_biases}) made by "
        f"omnivoice-onnx whisper generator v{GENERATOR_VERSION}, with large-v3's vocabulary and turbo's generation config. For tests and "
        "benchmarks: it transcribes nonsense.\n")
    return out_dir


def generated_whisper(name: str, seed: int = 0, zero_qv_biases: bool = False) -> Path:
    """One of GENERATED (`tiny-whisper`, `full-whisper`, `base-whisper`, `small-whisper`), generated once into the
    cache (a folder swap, like generated_folder).
    `zero_qv_biases`: the variant whose attention q/v biases are all zero (for the builder's test)."""
    if name not in GENERATED:
        raise UserError(f"unknown generated Whisper {name!r}; use one of {', '.join(GENERATED)}")
    final = cache_dir("checkpoints") / f"{name}-v{GENERATOR_VERSION}-seed{seed}{'-zero-qv-bias' * zero_qv_biases}"
    return generate_once(final, name, lambda folder: write_whisper_checkpoint(
        folder, size=name.split("-")[0], seed=seed, zero_qv_biases=zero_qv_biases))


def load_generation_config(folder: Path) -> dict:
    path = Path(folder) / "generation_config.json"
    if not path.is_file():
        raise UserError(f"{folder} has no generation_config.json; pass a Whisper checkpoint folder in the hub's layout")
    return json.loads(path.read_text())
