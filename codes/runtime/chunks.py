"""Text into streaming chunks: a short first chunk for early audio, then chunks that grow back to sentences.

- Sentences end at . ! ? and their CJK forms (an abbreviation's "." does not end one).
- The first sentence is cut at clause boundaries (, ; : spaced dashes, and the CJK 、，；：), so the
  first audio is a clause of at least `min_weight`; the rest of that sentence follows in pieces that
  each weigh at least twice the one before, until the sentence ends.
- Later sentences are grouped up to `max_weight`.
- Nothing ever weighs more than `max_weight`: a longer sentence is cut at clauses, then at spaces, then
  (scripts without spaces) by characters, so every chunk fits one work item.

No character is lost, repeated or reordered: joining the chunks gives the text back but for the
white space at the cuts (docs/DESIGN.md §first-chunk).
"""

from __future__ import annotations

import re

from codes.runtime.duration import text_weight
from codes.runtime.text import ABBREVIATIONS, CLOSING_MARKS

SENTENCE_ENDS = frozenset(".!?…。！？")
CLAUSE_MARKS = frozenset(",;:，、；：—–")
SPACED_DASH = re.compile(r"\s[-–—]\s")  # " - " is a dash; "well-known" is a word
# Lengths are spoken weight (codes/runtime/duration.py: a Latin letter 1, a CJK character 3), so one
# limit fits every script.
MIN_WEIGHT = 4  # no first chunk lighter than this: "Sure," (4.5) may stand alone, "Oh," (2.5) joins the next
MAX_WEIGHT = 200  # later chunks: whole sentences up to this weight (about 12 s of English)


def _cut_after(text: str, marks: frozenset[str], spaced_dash: bool = False) -> list[str]:
    """`text` cut after each mark (closing quotes and further marks stay with it); pieces keep their spaces."""
    cuts = set()
    for index, char in enumerate(text):
        if char not in marks:
            continue
        if char == "." and _abbreviation_before(text, index):
            continue
        end = index + 1
        while end < len(text) and (text[end] in marks or text[end] in CLOSING_MARKS):
            end += 1
        cuts.add(end)
    if spaced_dash:
        cuts.update(match.end() - 1 for match in SPACED_DASH.finditer(text))
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(text)), len(text)]
    return [text[start:end] for start, end in zip(bounds, bounds[1:]) if text[start:end]]


def _abbreviation_before(text: str, dot: int) -> bool:
    words = text[:dot + 1].split()
    return bool(words) and words[-1] in ABBREVIATIONS


def sentences(text: str) -> list[str]:
    return _cut_after(text, SENTENCE_ENDS)


def clauses(sentence: str) -> list[str]:
    return _cut_after(sentence, CLAUSE_MARKS, spaced_dash=True)


def _weight(text: str) -> float:
    return text_weight(text.strip())


def _split_run(word: str, max_weight: float) -> list[str]:
    """A run without spaces (Chinese, Japanese, Thai) cut into pieces of at most max_weight."""
    out, current = [], ""
    for char in word:
        if current.strip() and _weight(current + char) > max_weight:
            out.append(current)
            current = ""
        current += char
    return [*out, current] if current else out


def _by_length(piece: str, max_weight: float) -> list[str]:
    """A piece with no usable punctuation cut to at most max_weight: at spaces, else by characters."""
    out, current = [], ""
    for word in re.findall(r"\S+\s*|\s+", piece):
        if _weight(word) > max_weight:
            if current.strip():
                out.append(current)
                current = ""
            *whole, word = _split_run(word, max_weight)
            out.extend(whole)
        if current.strip() and _weight(current + word) > max_weight:
            out.append(current)
            current = ""
        current += word
    if current.strip():
        out.append(current)
    elif current and out:
        out[-1] += current
    return out


def _fitted(piece: str, max_weight: float) -> list[str]:
    """piece, or its clauses, or its words, each of at most max_weight."""
    if _weight(piece) <= max_weight:
        return [piece]
    out = []
    for clause in clauses(piece):
        out.extend([clause] if _weight(clause) <= max_weight else _by_length(clause, max_weight))
    return out


def _grouped(pieces: list[str], least, max_weight: float) -> list[str]:
    """Consecutive pieces joined while the chunk weighs less than least(chunks so far) and fits max_weight."""
    chunks, current = [], ""
    for piece in pieces:
        if current.strip() and (_weight(current) >= least(chunks) or _weight(current + piece) > max_weight):
            chunks.append(current)
            current = ""
        current += piece
    if current.strip():
        chunks.append(current)
    return chunks


def stream_chunks(text: str, min_weight: float = MIN_WEIGHT, max_weight: float = MAX_WEIGHT) -> list[str]:
    """The chunks a streamed text is spoken in, in order, stripped (see the module's docstring)."""
    parts = sentences(text)
    if not parts:
        return []
    first, rest = parts[0], parts[1:]
    pieces = [p for clause in clauses(first) for p in _fitted(clause, max_weight)]
    head = _grouped(pieces, lambda done: max(min_weight, 2 * _weight(done[-1])) if done else min_weight, max_weight)
    tail = _grouped([p for sentence in rest for p in _fitted(sentence, max_weight)], lambda _: max_weight, max_weight)
    return [chunk.strip() for chunk in (*head, *tail) if chunk.strip()]
