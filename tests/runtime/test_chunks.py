"""Streaming chunks: a clause first, then pieces that grow back to sentences, and never a word lost."""

from __future__ import annotations

import random

import pytest

from codes.runtime.text.chunks import MAX_WEIGHT, MIN_WEIGHT, TextStream, clauses, sentences, stream_chunks
from codes.runtime.text.duration import text_weight

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


def pushed(text: str, cuts: list[int]) -> tuple[list[list[str]], list[str]]:
    """What a TextStream gives for each piece of `text` cut at `cuts`, and at the flush."""
    stream, bounds = TextStream(), [0, *cuts, len(text)]
    return [stream.push(text[a:b]) for a, b in zip(bounds, bounds[1:])], stream.flush()


@pytest.mark.parametrize("text", TEXTS)
def test_text_arriving_in_pieces_keeps_every_character(text):
    rng = random.Random(len(text))
    for _ in range(20):
        cuts = sorted(rng.sample(range(1, len(text)), min(len(text) - 1, rng.randint(1, 12)))) if len(text) > 1 else []
        given, rest = pushed(text, cuts)
        chunks = [c for step in given for c in step] + rest
        assert squeezed("".join(chunks)) == squeezed(text)
        assert all(text_weight(c) <= MAX_WEIGHT for c in chunks)


def test_a_sentence_is_given_as_soon_as_the_next_one_begins_and_not_before():
    given, rest = pushed("Sure, I turned on the lights. It is 5.3 degrees. Dr. Smith said hi! Bye.",
                         [10, 30, 34, 44, 51, 55, 72])
    # 'Sure, I tu' | 'rned on the lights. ' | 'It i' | 's 5.3 degr' | 'ees. Dr' | '. Sm' | 'ith said hi! Bye' | '.'
    assert given == [["Sure,"], ["I turned on the lights."], [], [], ["It is 5.3 degrees."], [],
                     ["Dr. Smith said hi!"], []]  # the first clause goes as soon as the next word begins
    assert rest == ["Bye."]
    assert pushed("你好。今天天气很好。", [3, 5])[0] == [["你好。"], [], ["今天天气很好。"]]  # a CJK mark ends it at once
    assert pushed('He said "Hello." Then', [15, 16])[0] == [[], [], ['He said "Hello."']]  # the quote stays with it


def test_a_light_first_clause_waits_for_the_next_one():
    given, rest = pushed("Oh, sure, I will.", [2, 3, 8, 9, 11])  # 'Oh' ',' ' sure' ',' ' I' ' will.'
    assert given == [[], [], [], [], ["Oh, sure,"], []] and rest == ["I will."]


def test_the_first_sentence_of_a_stream_is_cut_as_a_whole_text_is():
    text = TEXTS[2]
    given, rest = pushed(text, [len(text) - 10])
    assert given[0] == stream_chunks(text.split(". ")[0] + ".")
    assert rest == ["Anything else?"]


@pytest.mark.parametrize("text", [TEXTS[2] * 20, "Dr. Smith. " * 400, "!" * 4000, "," * 4000, "中" * 4000,
                                  "a - " * 1000, "no punctuation at all " * 200])
def test_a_stream_reads_each_character_a_bounded_number_of_times_however_it_is_cut(text):
    """One character a push (Home Assistant sends tokens): the work is linear in the text. Before,
    every push read the whole pending text again, and "Dr. " * 1000 took 20 s, "!" * 4000 ten minutes."""
    stream = TextStream()
    chunks = [c for char in text for c in stream.push(char)] + stream.flush()
    assert squeezed("".join(chunks)) == squeezed(text)
    assert stream.examined <= 5 * len(text), stream.examined
