"""codes.runtime.text.cleanup against upstream's text helpers, input by input."""

from __future__ import annotations

import random

import pytest
from helpers.upstream_twins import extraction_tool

from omnivoice.models.omnivoice import _NONVERBAL_PATTERN, _combine_text
from omnivoice.utils import text as upstream_text

from codes.runtime.data import load_table
from codes.runtime.text import cleanup as text

COMBINE_CASES = [
    ("Hello world.", None),
    ("  Hello\r\n world  ", "  That was\nthe reference.  "),
    ("你好 ， 世界 ！", "参考 文本"),
    ("Mixed 中文 and English\ttabs\t\there", "ref（with parens）"),
    ("（全角括号）里面", None),
    ("a  b   c", ""),
    ("\n\n", "only ref"),
    ("日本語 のテキスト 한국어 텍스트", "Ref 文本 end"),
]


@pytest.mark.parametrize("target, ref", COMBINE_CASES)
def test_combine_text_equals_upstream(target, ref):
    assert text.combine_text(target, ref) == _combine_text(target, ref_text=ref)


@pytest.mark.parametrize(
    "sample", ["Hello", "Hello.", "  padded  ", "", "   ", "你好", "你好。", "mixed 中文", "quote'", "end…", "list、"]
)
def test_add_punctuation_equals_upstream(sample):
    assert text.add_punctuation(sample) == upstream_text.add_punctuation(sample)


LONG_TEXTS = [
    'Mr. Smith went to Washington. He met Dr. Jones, who said: "No." Then they left! Did they? Yes.',
    "今天天气很好。我们去公园散步吧！你觉得怎么样？好的，走吧；出发：现在。",
    "No punctuation at all in this rather long sentence that keeps going and going",
    "Short. A. B. C. Longer sentence here, with a comma. And e.g. an abbreviation vs. another.",
    ".Leading punctuation, then text.」Closing marks” after. 'Quoted.' End",
    "“引号。”之后的句子。（括号）里的内容！？最后",
]


@pytest.mark.parametrize("sample", LONG_TEXTS)
@pytest.mark.parametrize("chunk_len", [1, 5, 12, 30, 80, 1000])
@pytest.mark.parametrize("min_chunk_len", [None, 3, 20])
def test_chunk_text_punctuation_equals_upstream(sample, chunk_len, min_chunk_len):
    ours = text.chunk_text_punctuation(sample, chunk_len=chunk_len, min_chunk_len=min_chunk_len)
    assert ours == upstream_text.chunk_text_punctuation(sample, chunk_len=chunk_len, min_chunk_len=min_chunk_len)


def test_chunk_text_punctuation_equals_upstream_on_random_text():
    alphabet = list("abc de ") + list(".,;:!?。，；：！？") + list("\"'“”）]》>」】") + ["Mr.", "Dr. ", "e.g.", "你好"]
    rng = random.Random(0)
    for _ in range(300):
        sample = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 80)))
        chunk_len, min_len = rng.randint(1, 40), rng.choice([None, 1, 3, 10])
        expected = upstream_text.chunk_text_punctuation(sample, chunk_len=chunk_len, min_chunk_len=min_len)
        assert text.chunk_text_punctuation(sample, chunk_len, min_len) == expected, (sample, chunk_len, min_len)


def test_chunk_long_text_uses_upstream_chunk_length():
    sample = " ".join(LONG_TEXTS)
    # upstream: int(audio_chunk_duration * frame_rate / (target_len / len(text))), min_chunk_len=3
    target_len = 900
    chunk_len = int(15.0 * 25 / (target_len / len(sample)))
    assert text.chunk_len_for(sample, target_len, 15.0, 25) == chunk_len
    expected = upstream_text.chunk_text_punctuation(sample, chunk_len=chunk_len, min_chunk_len=3)
    assert text.chunk_long_text(sample, target_len, 15.0, 25) == expected


def test_split_nonverbal_keeps_tags_whole_and_drops_empty_pieces():
    sample = "<|text_start|>[laughter]Hi [sigh] there[question-en][unknown-tag]<|text_end|>"
    assert text.split_nonverbal(sample) == [
        "<|text_start|>",
        "[laughter]",
        "Hi ",
        "[sigh]",
        " there",
        "[question-en]",
        "[unknown-tag]<|text_end|>",
    ]
    assert [m.group() for m in _NONVERBAL_PATTERN.finditer(sample)] == ["[laughter]", "[sigh]", "[question-en]"]


def test_text_rules_json_equals_upstream_tables():
    assert load_table("text_rules") == extraction_tool().text_table()
    assert text.SPLIT_PUNCTUATION == upstream_text.SPLIT_PUNCTUATION
    assert text.CLOSING_MARKS == upstream_text.CLOSING_MARKS
    assert text.END_PUNCTUATION == upstream_text.END_PUNCTUATION
    assert text.ABBREVIATIONS == upstream_text.ABBREVIATIONS
