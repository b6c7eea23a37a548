"""Text clean-up, end punctuation, non-verbal tags and long-text chunking.

Mirrors what upstream's generation does to text before tokenizing
(`_combine_text`, `add_punctuation`, `_tokenize_with_nonverbal_tags`,
`chunk_text_punctuation`). The punctuation sets, abbreviations and tag names
are upstream's, kept in codes/runtime/data/text_rules.json.
"""

from __future__ import annotations

import re

from codes.runtime.data import load_table

_RULES = load_table("text_rules")
SPLIT_PUNCTUATION = frozenset(_RULES["split_punctuation"])
CLOSING_MARKS = frozenset(_RULES["closing_marks"])
END_PUNCTUATION = frozenset(_RULES["end_punctuation"])
ABBREVIATIONS = frozenset(_RULES["abbreviations"])
NONVERBAL_TAGS = tuple(_RULES["nonverbal_tags"])

# Only the CJK Unified Ideographs block counts as "Chinese" upstream.
_CJK = "\u4e00-\u9fff"
_CJK_RE = re.compile(f"[{_CJK}]")
_SPACES_NEXT_TO_CJK = re.compile(rf"(?<=[{_CJK}])\s+|\s+(?=[{_CJK}])")
_NONVERBAL_RE = re.compile(r"\[(?:" + "|".join(re.escape(t) for t in NONVERBAL_TAGS) + r")\]")


def contains_chinese(text: str) -> bool:
    return _CJK_RE.search(text) is not None


def combine_text(text: str, ref_text: str | None = None) -> str:
    """The transcript the model reads: reference text, a space, then the target text, cleaned up."""
    full_text = f"{ref_text.strip()} {text.strip()}" if ref_text else text.strip()
    full_text = re.sub(r"[\r\n]+", "", full_text)
    full_text = full_text.replace("\uff08", "(").replace("\uff09", ")")
    full_text = re.sub(r"[ \t]+", " ", full_text)
    # Chinese has no word spaces; a stray one would be read as a pause.
    return _SPACES_NEXT_TO_CJK.sub("", full_text)


def add_punctuation(text: str) -> str:
    """Strip, then end with "。" (text with Chinese) or "." unless it already ends in punctuation."""
    text = text.strip()
    if text and text[-1] not in END_PUNCTUATION:
        text += "。" if contains_chinese(text) else "."
    return text


def split_nonverbal(text: str) -> list[str]:
    """Cut text around non-verbal tags like "[laughter]", keeping each tag as its own piece.

    Upstream tokenizes every piece separately so a tag gets the same token ids
    whatever language surrounds it. Empty pieces are dropped.
    """
    pieces, last_end = [], 0
    for match in _NONVERBAL_RE.finditer(text):
        if match.start() > last_end:
            pieces.append(text[last_end : match.start()])
        pieces.append(match.group())
        last_end = match.end()
    if last_end < len(text):
        pieces.append(text[last_end:])
    return pieces


def _ends_in_abbreviation(sentence: list[str]) -> bool:
    words = "".join(sentence).split()
    return bool(words) and words[-1] in ABBREVIATIONS


def split_sentences(text: str) -> list[list[str]]:
    """Characters grouped into sentences, each ending at split punctuation.

    A "." after an abbreviation ("Mr.") does not end a sentence, and punctuation
    or closing quotes that would open a sentence join the previous one instead.
    """
    sentences: list[list[str]] = []
    current: list[str] = []
    for char in text:
        if not current and sentences and (char in SPLIT_PUNCTUATION or char in CLOSING_MARKS):
            sentences[-1].append(char)
            continue
        current.append(char)
        if char in SPLIT_PUNCTUATION and not (char == "." and _ends_in_abbreviation(current)):
            sentences.append(current)
            current = []
    if current:
        sentences.append(current)
    return sentences


def chunk_text_punctuation(text: str, chunk_len: int, min_chunk_len: int | None = None) -> list[str]:
    """Split long text at sentence ends into chunks of at most `chunk_len` characters.

    A single sentence longer than `chunk_len` stays whole. With `min_chunk_len`,
    a chunk shorter than that joins the previous chunk (a short first chunk
    takes in the second). Chunks are stripped; empty ones are dropped.
    """
    chunks: list[list[str]] = []
    current: list[str] = []
    for sentence in split_sentences(text):
        if len(current) + len(sentence) <= chunk_len:
            current.extend(sentence)
        else:
            if current:
                chunks.append(current)
            current = sentence
    if current:
        chunks.append(current)

    if min_chunk_len is not None:
        first_is_short = bool(chunks) and len(chunks[0]) < min_chunk_len
        merged: list[list[str]] = []
        for index, chunk in enumerate(chunks):
            joins_previous = (index == 1 and first_is_short) or (len(chunk) < min_chunk_len and merged)
            if joins_previous:
                merged[-1].extend(chunk)
            else:
                merged.append(chunk)
        chunks = merged

    stripped = ("".join(chunk).strip() for chunk in chunks)
    return [chunk for chunk in stripped if chunk]


def chunk_len_for(text: str, target_len: int, audio_chunk_duration: float, frame_rate: int) -> int:
    """Characters per chunk so that each chunk lasts about `audio_chunk_duration` seconds.

    Scales by the whole text's estimated frames per character, as upstream's
    `_generate_chunked` does.
    """
    frames_per_char = target_len / len(text)
    return int(audio_chunk_duration * frame_rate / frames_per_char)


def chunk_long_text(text: str, target_len: int, audio_chunk_duration: float, frame_rate: int) -> list[str]:
    """Upstream's chunking of a long item: punctuation chunks of ~`audio_chunk_duration` s, at least 3 chars."""
    chunk_len = chunk_len_for(text, target_len, audio_chunk_duration, frame_rate)
    return chunk_text_punctuation(text, chunk_len=chunk_len, min_chunk_len=3)
