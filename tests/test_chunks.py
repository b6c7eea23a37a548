"""Streaming chunks: a clause first, then pieces that grow back to sentences, and never a word lost."""

from __future__ import annotations

import random

import pytest

from codes.runtime.chunks import MAX_WEIGHT, MIN_WEIGHT, clauses, sentences, stream_chunks
from codes.runtime.duration import text_weight

TEXTS = [
    "Turning on the kitchen lights.",
    "Hello there, this is the first sentence. And here comes a second one, a little longer.",
    "Sure, I checked the forecast for tomorrow, and it looks like light rain in the morning, clearing by noon, "
    "with a high of eighteen degrees, so bring an umbrella. Anything else?",
    "Mr. Smith met Dr. Jones at 5 p.m. - they talked; then, finally, they left! Did they? Yes.",
    "今天天气很好，我们去公园散步吧。然后去吃饭！好吗？",
    "今日はいい天気ですね、散歩に行きましょう。それから、ご飯を食べましょう。",
    "วันนี้อากาศดีมากเราไปเดินเล่นที่สวนสาธารณะกันเถอะแล้วค่อยไปกินข้าวด้วยกันที่ร้านอาหารใกล้บ้าน" * 4,
    "مرحبا، كيف حالك اليوم؟ أنا بخير، شكرا لك.",
    "नमस्ते, आप कैसे हैं? मैं ठीक हूँ, धन्यवाद।",
    "Привет, как дела? Всё хорошо — спасибо, а у тебя?",
    "\"Quoted,\" she said. \"Another one!\" (and a bracket.)",
    "no punctuation at all but a very long run of words " * 12,
    "中" * 300,
    "   spaced    out,    text .   ",
    "[laughter] Well, that was funny [sigh], wasn't it?",
    "x",
]


def squeezed(text: str) -> str:
    return "".join(text.split())


@pytest.mark.parametrize("text", TEXTS)
def test_no_character_is_lost_repeated_or_reordered(text):
    chunks = stream_chunks(text)
    assert squeezed("".join(chunks)) == squeezed(text)
    assert all(chunk == chunk.strip() and chunk for chunk in chunks)


def test_random_texts_in_many_scripts_keep_every_character():
    rng = random.Random(0)
    alphabet = list("abcdefghij klmnop 中文字 日本語 ไทย عربي हिंदी ,.;:!?，。、；：！？—–-\"'()") + [" - ", "Mr. ", "...", "…"]
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 400)))
        chunks = stream_chunks(text, min_weight=rng.choice([1, 8, 20]), max_weight=rng.choice([30, 80, 200]))
        assert squeezed("".join(chunks)) == squeezed(text)


@pytest.mark.parametrize("text", TEXTS)
def test_no_chunk_outweighs_the_limit(text):
    assert all(text_weight(chunk) <= MAX_WEIGHT for chunk in stream_chunks(text))


def test_the_first_chunk_is_a_clause_and_later_chunks_grow_back_to_sentences():
    chunks = stream_chunks(TEXTS[2])
    assert chunks[:2] == ["Sure,", "I checked the forecast for tomorrow,"]
    first_sentence = chunks[:-1]
    weights = [text_weight(c) for c in first_sentence]
    assert all(later >= 2 * earlier for earlier, later in zip(weights, weights[1:-1]))  # the last takes the rest
    assert first_sentence[-1].endswith("umbrella.")  # the first sentence's pieces end with it
    assert stream_chunks("Oh, I see, that is good.")[0] == "Oh, I see,"  # "Oh," is under MIN_WEIGHT
    assert text_weight("Oh,") < MIN_WEIGHT <= text_weight("Oh, I see,")
    assert chunks[-1] == "Anything else?"  # later sentences whole


def test_later_sentences_are_grouped_whole_up_to_the_limit():
    text = "One. Two two. Three three three. " * 20
    chunks = stream_chunks(text)
    assert chunks[0] == "One."
    assert all(chunk.endswith(".") for chunk in chunks)  # every cut at a sentence end
    assert all(text_weight(chunk) <= MAX_WEIGHT for chunk in chunks) and len(chunks) < 20


def test_a_short_first_sentence_is_not_cut_and_nothing_to_say_gives_nothing():
    assert stream_chunks("Turning on the kitchen lights.") == ["Turning on the kitchen lights."]
    assert stream_chunks("   ") == [] and stream_chunks("") == []


def test_sentences_and_clauses_keep_abbreviations_quotes_and_words_with_hyphens():
    assert [s.strip() for s in sentences("Mr. Smith is here. \"Is he?\" Yes!")] == ["Mr. Smith is here.", "\"Is he?\"",
                                                                                  "Yes!"]
    assert [c.strip() for c in clauses("a well-known fact - and more; ok, fine")] == ["a well-known fact -", "and more;",
                                                                                     "ok,", "fine"]
    assert [c for c in clauses("甲，乙、丙：丁")] == ["甲，", "乙、", "丙：", "丁"]


def test_runs_without_spaces_or_punctuation_are_cut_by_weight():
    chunks = stream_chunks("中" * 300)  # 900 of weight: no clause, no space
    assert len(chunks) == 5 and all(text_weight(c) <= MAX_WEIGHT for c in chunks)
    words = stream_chunks("word " * 200)
    assert all(not c.startswith("ord") and c.split()[0] == "word" for c in words)  # cut at spaces
