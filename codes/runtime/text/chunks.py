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

from codes.runtime.text.cleanup import ABBREVIATIONS, CLOSING_MARKS
from codes.runtime.text.duration import char_weight, text_weight

SENTENCE_ENDS = frozenset(".!?…。！？")
CLAUSE_MARKS = frozenset(",;:，、；：—–")
SPACED_DASH = re.compile(r"\s[-–—]\s")  # " - " is a dash; "well-known" is a word
# Lengths are spoken weight (codes/runtime/text/duration.py: a Latin letter 1, a CJK character 3), so one
# limit fits every script.
MIN_WEIGHT = 4  # no first chunk lighter than this: "Sure," (4.5) may stand alone, "Oh," (2.5) joins the next
MAX_WEIGHT = 200  # later chunks: whole sentences up to this weight (about 12 s of English)
_LONGEST_ABBREVIATION = max(map(len, ABBREVIATIONS))


def _cut_after(text: str, marks: frozenset[str], spaced_dash: bool = False) -> list[str]:
    """`text` cut after each mark (closing quotes and further marks stay with it); pieces keep their spaces."""
    cuts, run_end = set(), 0
    for index, char in enumerate(text):
        if char not in marks or index < run_end:  # inside a run already cut at its end: "!!!" is read once
            continue
        if char == "." and _abbreviation_before(text, index):
            continue
        if char in ".!?" and index + 1 < len(text) and text[index + 1].isalnum():  # 5.3, e.g, a.m.
            continue
        end = index + 1
        while end < len(text) and (text[end] in marks or text[end] in CLOSING_MARKS):
            end += 1
        cuts.add(end)
        run_end = end
    if spaced_dash:
        cuts.update(match.end() - 1 for match in SPACED_DASH.finditer(text))
    bounds = [0, *sorted(c for c in cuts if 0 < c < len(text)), len(text)]
    return [text[start:end] for start, end in zip(bounds, bounds[1:]) if text[start:end]]


def _abbreviation_before(text: str, dot: int) -> bool:
    """Whether the word that ends at `dot` is an abbreviation. It looks back no further than the
    longest abbreviation, so a text of many dots is read in linear time."""
    start = dot
    while start > 0 and not text[start - 1].isspace() and dot - start < _LONGEST_ABBREVIATION:
        start -= 1
    if start > 0 and not text[start - 1].isspace():  # a longer word: no abbreviation
        return False
    return text[start:dot + 1] in ABBREVIATIONS


def sentences(text: str) -> list[str]:
    return _cut_after(text, SENTENCE_ENDS)


def clauses(sentence: str) -> list[str]:
    return _cut_after(sentence, CLAUSE_MARKS, spaced_dash=True)


def _weight(text: str) -> float:
    return text_weight(text.strip())


def _split_run(word: str, max_weight: float) -> list[str]:
    """A run without spaces (Chinese, Japanese, Thai) cut into pieces of at most max_weight."""
    out, current, weight, spoken = [], "", 0.0, False  # weight: _weight(current), kept as the run is read
    for char in word:
        added = 0.0 if char.isspace() else char_weight(char)  # white space only ends a run: .strip() drops it
        if spoken and weight + added > max_weight:
            out.append(current)
            current, weight, spoken = "", 0.0, False
        current += char
        weight += added
        spoken = spoken or not char.isspace()
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
    and never an abbreviation's dot ("Dr. " waits for the next word).

    Work is linear in the text however it is cut (one character a push included): a mark's verdict is
    final once the character after its run has come, so each scan goes on from where the last push
    left it, and what a cut leaves behind (all of it from the push that made the cut) is read once more.
    `examined` counts the characters read, for tests/runtime/test_chunks.py."""

    def __init__(self, min_weight: float = MIN_WEIGHT, max_weight: float = MAX_WEIGHT):
        self.min_weight, self.max_weight = min_weight, max_weight
        self.pending = ""
        self.started = False
        self.examined = 0
        self._rescan()

    def _rescan(self) -> None:
        """Scan `pending` from its start again (it has just lost its head)."""
        self._sentence_from = self._sentence_run = 0  # where the sentence scan goes on; a run at the end read to here
        self._clause_from = self._clause_run = 0  # the same for the first clause's scan
        self._dash_end = 0  # where the last spaced dash ended (spaced dashes do not overlap, as in SPACED_DASH)

    def push(self, text: str) -> list[str]:
        self.pending += text
        end = self._complete()
        if not end and not self.started:  # the first sentence goes on: its first clause may go now
            return self._first_clause()
        return self._chunks(self._take(end))

    def _take(self, end: int) -> str:
        done, self.pending = self.pending[:end], self.pending[end:]
        if end:
            self._rescan()
        return done

    def _complete(self) -> int:
        """How much of `pending` is complete sentences (0: none): up to the last cut that sentences()
        makes, or all of it where it ends a sentence (white space after the cut, or a CJK mark)."""
        text, last_cut, index = self.pending, 0, self._sentence_from
        while index < len(text):
            self.examined += 1
            char = text[index]
            if char not in SENTENCE_ENDS or (char == "." and _abbreviation_before(text, index)):
                index += 1
                continue
            if char in ".!?" and index + 1 < len(text) and text[index + 1].isalnum():  # 5.3, e.g, a.m.
                index += 1
                continue
            end = max(index + 1, self._sentence_run)
            while end < len(text) and (text[end] in SENTENCE_ENDS or text[end] in CLOSING_MARKS):
                end += 1
                self.examined += 1
            if end == len(text):  # "Hello." may go on as "Hello..." or 'Hello."': the next piece decides
                self._sentence_run = end
                break
            last_cut, index, self._sentence_run = end, end, 0
        self._sentence_from = index
        if index < len(text) and text[-1] in "。！？":
            return len(text)
        if last_cut and text[last_cut:].isspace():
            return len(text)
        return last_cut

    def _first_clause(self) -> list[str]:
        """The opening clauses of an unfinished first sentence once they weigh `min_weight` and
        more text follows them (a clause is complete only then)."""
        text, index = self.pending, self._clause_from
        while index < len(text):
            self.examined += 1
            cut = self._clause_cut(text, index)
            if cut is None:
                index += 1
                continue
            if cut == len(text):  # its end is not known yet
                break
            self.examined += cut
            if _weight(text[:cut]) >= self.min_weight:
                self.started = True
                head = self._take(cut)
                return [piece.strip() for piece in _fitted(head, self.max_weight) if piece.strip()]
            index = cut
        self._clause_from = index
        return []

    def _clause_cut(self, text: str, index: int) -> int | None:
        """Where clauses() cuts after the character at `index` (len(text): not known yet), or None."""
        char = text[index]
        if char in "-–—" and 0 < index and index - 1 >= self._dash_end and text[index - 1].isspace():
            if index + 1 == len(text):
                return len(text)
            if text[index + 1].isspace():
                self._dash_end = index + 2
                return index + 1
        if char not in CLAUSE_MARKS:
            return None
        end = max(index + 1, self._clause_run)
        while end < len(text) and (text[end] in CLAUSE_MARKS or text[end] in CLOSING_MARKS):
            end += 1
            self.examined += 1
        self._clause_run = end if end == len(text) else 0
        return end

    def flush(self) -> list[str]:
        return self._chunks(self._take(len(self.pending)))

    def _chunks(self, text: str) -> list[str]:
        self.examined += len(text)
        if not text.strip():
            return []
        if not self.started:
            self.started = True
            return stream_chunks(text, self.min_weight, self.max_weight)
        return [c.strip() for sentence in sentences(text) for c in _fitted(sentence, self.max_weight) if c.strip()]
