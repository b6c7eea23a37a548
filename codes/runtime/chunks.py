"""Text into streaming chunks: a short first chunk for early audio, then chunks that grow back to sentences.

- Sentences end at . ! ? and their CJK forms (an abbreviation's "." does not end one, nor one
  inside a word or number: 5.3, e.g).
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
        if char in ".!?" and index + 1 < len(text) and text[index + 1].isalnum():  # 5.3, e.g, a.m.
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


class TextStream:
    """Chunks of a text that arrives in pieces (an LLM's reply as it is written): push() gives each
    sentence as soon as it is complete, flush() the rest. The first audio is a clause, as in
    stream_chunks: given as soon as it is complete, or the first sentence cut as stream_chunks cuts
    it where it came whole; later sentences come whole (cut only past `max_weight`). A sentence is
    complete once what follows it shows it ends: white space after its mark, or (CJK) the mark itself,
    and never an abbreviation's dot ("Dr. " waits for the next word)."""

    def __init__(self, min_weight: float = MIN_WEIGHT, max_weight: float = MAX_WEIGHT):
        self.min_weight, self.max_weight = min_weight, max_weight
        self.pending = ""
        self.started = False

    def push(self, text: str) -> list[str]:
        self.pending += text
        parts = sentences(self.pending)
        done = parts[:-1]
        if parts and self._ends_sentence(self.pending):
            done = parts
        if not done and not self.started:  # the first sentence goes on: its first clause may go now
            return self._first_clause(parts[0] if parts else "")
        self.pending = self.pending[sum(map(len, done)):]
        return self._chunks("".join(done))

    def _first_clause(self, sentence: str) -> list[str]:
        """The opening clauses of an unfinished first sentence once they weigh `min_weight` and
        more text follows them (a clause is complete only then)."""
        head = ""
        for clause in clauses(sentence)[:-1]:
            head += clause
            if _weight(head) >= self.min_weight:
                self.started = True
                self.pending = self.pending[len(head):]
                return [piece.strip() for piece in _fitted(head, self.max_weight) if piece.strip()]
        return []

    def flush(self) -> list[str]:
        text, self.pending = self.pending, ""
        return self._chunks(text)

    @staticmethod
    def _ends_sentence(text: str) -> bool:
        """Whether `text` ends with a finished sentence: one the next word would be cut from."""
        stripped = text.rstrip()
        if not stripped or stripped[-1] not in SENTENCE_ENDS | CLOSING_MARKS:
            return False
        if stripped == text and stripped[-1] not in "。！？":  # "Hello." may go on as "Hello..." or 'Hello."'
            return False
        probe = sentences(text + "A")
        return len(probe) > 1 and probe[-1].strip() == "A"

    def _chunks(self, text: str) -> list[str]:
        if not text.strip():
            return []
        if not self.started:
            self.started = True
            return stream_chunks(text, self.min_weight, self.max_weight)
        return [c.strip() for sentence in sentences(text) for c in _fitted(sentence, self.max_weight) if c.strip()]
