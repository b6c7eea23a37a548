"""A book into a Script: one segment a sentence, pauses at paragraphs and chapters, a narrator and, where
asked, a second voice for what is in quotation marks.

Sentences are cut at sentence ends as the runtime's chunking cuts them (codes/runtime/text/chunks.py: an
abbreviation's "." ends none; a piece under 3 characters joins the one before), and each is one segment, so
that an edited paragraph re-speaks only the sentences that changed and a read-along times every sentence
by its own samples. A sentence longer than a work item is cut further by the runtime, as any long text.
A chapter's title is spoken first (unless titles=False); its first segment is where its mark goes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

from codes.common.errors import UserError
from codes.common.fileio import read_bounded
from codes.runtime.book.epub import read_epub
from codes.runtime.book.markup import read_html, read_markdown
from codes.runtime.book.model import Book, ReadingChoices
from codes.runtime.book.plaintext import read_text_book
from codes.runtime.script import Break, Script, Segment, check_name
from codes.runtime.text.chunks import sentences

BOOK_FORMATS = ("epub", "markdown", "html", "book")  # "book": plain text read as a book (chapter lines)
SUFFIXES = {".epub": "epub", ".md": "markdown", ".markdown": "markdown", ".html": "html", ".htm": "html",
            ".xhtml": "html"}
MAX_BOOK_BYTES = 256 << 20  # a novel's EPUB with its images is a few MB; far more is a wrong path
MIN_SENTENCE_CHARS = 3  # upstream's min_chunk_len: a shorter piece joins the one before
DIALOGUE_SPEAKER = "Dialogue"
# Quotation marks (opening, closing) each language prints dialogue in; straight quotes everywhere.
QUOTES = {"en": (("“", "”"),), "de": (("„", "“"), ("»", "«")), "fr": (("«", "»"), ("“", "”")),
          "es": (("«", "»"), ("“", "”")), "it": (("«", "»"), ("“", "”")), "pt": (("«", "»"), ("“", "”")),
          "ru": (("«", "»"), ("„", "“")), "pl": (("„", "”"), ("«", "»")), "nl": (("“", "”"), ("‘", "’")),
          "sv": (("”", "”"), ("»", "»")), "zh": (("“", "”"), ("「", "」")), "ja": (("「", "」"), ("『", "』"))}
ALL_QUOTES = (("“", "”"), ("«", "»"), ("„", "“"), ("「", "」"), ("『", "』"))


def book_format(path, script_format: str | None = None) -> str | None:
    """The book format a file is read as (by --script_format, else by extension), or None: a script."""
    if script_format is not None:
        return script_format if script_format in BOOK_FORMATS else None
    return SUFFIXES.get(Path(path).suffix.lower())


def parse_book(data: bytes | str, book_format: str, choices: ReadingChoices = ReadingChoices(),
               source: str = "book") -> Book:
    readers = {"epub": read_epub, "markdown": read_markdown, "html": read_html, "book": read_text_book}
    if book_format not in readers:
        raise UserError(f"book format must be one of {', '.join(BOOK_FORMATS)}, got {book_format!r}")
    if book_format == "epub" and isinstance(data, str):
        raise UserError(f"{source}: an EPUB is a file's bytes (base64 in JSON), not text")
    if not data.strip():
        raise UserError(f"{source} is empty; give a book with text in it")
    return readers[book_format](data, choices, source)


def read_book(path, book_format: str | None = None, choices: ReadingChoices = ReadingChoices()) -> Book:
    path = Path(path)
    data = read_bounded(path, MAX_BOOK_BYTES, "book")
    return parse_book(data, book_format or SUFFIXES.get(path.suffix.lower(), "book"), choices, str(path))


@dataclass(frozen=True)
class Reading:
    """How a book is read aloud (docs/books.md): the pauses, whether titles are spoken, and the voice of
    quoted dialogue (a speaker's name, or None: the narrator reads it)."""

    paragraph_gap: float = 0.6
    chapter_gap: float = 2.0
    titles: bool = True
    dialogue_speaker: str | None = None
    language: str | None = None  # picks the quotation marks; None: the book's, else every common pair


@dataclass(frozen=True)
class Spot:
    """Where a segment is in the book: its chapter and its paragraph (-1: the chapter's title)."""

    chapter: int
    paragraph: int


@dataclass(frozen=True)
class BookScript:
    book: Book
    script: Script
    spots: tuple[Spot, ...]  # one a segment, in order
    chapter_starts: tuple[int, ...]  # each chapter's first segment

    def chapter_of(self, segment: int) -> int:
        return self.spots[segment].chapter


def sentences_of(text: str) -> list[str]:
    """A paragraph's sentences, cut at sentence ends as the runtime's chunking cuts them (an abbreviation's
    or a number's "." ends none). A scrap under 3 characters, or a piece that goes on in lower case after a
    quotation ("“Ready?” he asked."), stays with the sentence before."""
    found: list[str] = []
    for sentence in (piece.strip() for piece in sentences(text)):
        if not sentence:
            continue
        if found and not any(c.isalnum() for c in sentence):  # a closing mark the cut left behind: »Jetzt.«
            found[-1] += sentence
        elif found and (len(sentence) < MIN_SENTENCE_CHARS or len(found[-1]) < MIN_SENTENCE_CHARS
                        or sentence[0].islower()):
            found[-1] = f"{found[-1]} {sentence}"
        else:
            found.append(sentence)
    return found


def quoted_runs(text: str, pairs) -> list[tuple[str, bool]]:
    """A paragraph cut into (text, quoted) runs at the quotation marks of `pairs`, marks kept with their
    words; a quote never closed runs to the paragraph's end (as a novel's multi-paragraph speech does)."""
    runs: list[tuple[str, bool]] = []
    pattern = "|".join([*(f"{re.escape(o)}.*?(?:{re.escape(c)}|$)" for o, c in pairs), "\"[^\"]*(?:\"|$)"])
    last = 0
    for match in re.finditer(pattern, text, re.S):
        if text[last:match.start()].strip():
            runs.append((text[last:match.start()].strip(), False))
        if match.group().strip():
            runs.append((match.group().strip(), True))
        last = match.end()
    if text[last:].strip():
        runs.append((text[last:].strip(), False))
    return runs


def book_script(book: Book, reading: Reading = Reading()) -> BookScript:
    if reading.dialogue_speaker is not None:
        check_name(reading.dialogue_speaker)
    language = (reading.language or book.language or "").split("-")[0].split("_")[0].lower()
    pairs = QUOTES.get(language, ALL_QUOTES)
    # A chapter with nothing to say (a title alone, titles unspoken) is no chapter of the audiobook.
    book = replace(book, chapters=tuple(c for c in book.chapters if c.paragraphs or reading.titles and c.title))
    items: list[Segment | Break] = []
    spots: list[Spot] = []
    starts: list[int] = []

    def say(text: str, speaker, spot: Spot, where: str):
        for sentence in sentences_of(text):
            items.append(Segment(sentence, speaker, where=where))
            spots.append(spot)

    for number, chapter in enumerate(book.chapters):
        if items:
            items.append(Break(reading.chapter_gap, f"before chapter {number + 1}"))
        starts.append(len(spots))
        if reading.titles and chapter.title:
            say(chapter.title, None, Spot(number, -1), f"chapter {number + 1} title")
        for index, paragraph in enumerate(chapter.paragraphs):
            if len(spots) > starts[-1]:
                items.append(Break(reading.paragraph_gap, f"chapter {number + 1} paragraph {index + 1}"))
            where = f"chapter {number + 1} paragraph {index + 1}"
            if reading.dialogue_speaker is None:
                say(paragraph, None, Spot(number, index), where)
                continue
            for run, quoted in quoted_runs(paragraph, pairs):
                say(run, reading.dialogue_speaker if quoted else None, Spot(number, index), where)
    if not spots:
        raise UserError(f"{book.source} has no text to read; is it the right file?")
    script = Script(tuple(items), timed=False, source=book.source)
    return BookScript(book, script, tuple(spots), tuple(starts))
