"""Plain text into a Book: paragraphs at blank lines (hard-wrapped lines joined), chapters at chapter lines.

A chapter line is a paragraph of one short line that names a chapter, in the forms books print:
"Chapter 12", "CHAPTER XII", "Chapter Twelve: The Storm", "Part II", "12.", a lone "XII", "Prologue",
"Epilogue", and their forms in French, German, Spanish, Italian, Portuguese, Dutch, Russian, Chinese and
Japanese ("Chapitre 3", "Kapitel 3", "3. Kapitel", "Capítulo 3", "Глава 3", "第三章"). A short line
right after it with no sentence end is its title ("CHAPTER I" then "THE STORM"). What comes before the
first chapter line is the title page when it is a few short lines ("Title", "by Author"), else a chapter.
"""

from __future__ import annotations

import re

from codes.runtime.book.markup import kind_of
from codes.runtime.book.model import Book, Chapter, ReadingChoices, kept_chapters, untitled
from codes.runtime.script import decode

_WORDS = ("chapter|chap\\.|book|part|chapitre|livre|partie|kapitel|buch|teil|cap[ií]tulo|libro|parte|capitolo|"
          "hoofdstuk|deel|глава|часть|книга")
_NUMBER_WORDS = ("one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|thirteen|fourteen|fifteen|"
                 "sixteen|seventeen|eighteen|nineteen|twenty|thirty|forty|fifty|sixty|seventy|eighty|ninety|"
                 "hundred|first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|final|"
                 "un|une|deux|trois|quatre|cinq|eins|zwei|drei|vier|fünf|uno|dos|tres|cuatro|cinco|due|tre|"
                 "quattro|um|dois|três|premier|première|erstes|zweites|primero|primo")
_ROMAN = "(?=[ivxlcdm]+\\b)m{0,3}(?:cm|cd|d?c{0,3})(?:xc|xl|l?x{0,3})(?:ix|iv|v?i{0,3})"
_NUMBER = f"(?:\\d{{1,4}}|{_ROMAN}|(?:{_NUMBER_WORDS})(?:[- ](?:{_NUMBER_WORDS}))*)"
_SPECIAL = ("prologue|prolog|prólogo|prologo|пролог|epilogue|epilog|épilogue|epílogo|epilogo|эпилог|"
            "preface|préface|prefacio|prefazione|prefácio|vorwort|foreword|afterword|nachwort|introduction|"
            "einleitung|interlude|zwischenspiel")
CHAPTER_LINE = re.compile(
    f"^(?:(?:{_WORDS})\\s+{_NUMBER}\\b\\.?|{_NUMBER}\\.\\s*(?:kapitel|teil|buch)|{_SPECIAL}|"
    f"第[0-9一二三四五六七八九十百千零〇两]+[章回节節部]|プロローグ|エピローグ|序章|终章|終章|尾声)"
    f"(?:\\s*[:.—–-]\\s*(?P<title>.+)|\\s+(?P<rest>.+))?$", re.I)
# A number alone on its line: arabic, or an upper-case roman numeral up to C ("MIX" and "CIVIL" are words).
LONE_NUMBER = re.compile(r"^(?:\d{1,3}\.?|(?=[IVXLC]+\.?$)C{0,3}(?:XC|XL|L?X{0,3})(?:IX|IV|V?I{0,3})\.?)$")
MAX_CHAPTER_LINE = 80  # characters: a longer line is text, whatever it begins with
_SENTENCE_END = re.compile(r"[.!?…。！？\"”»]\s*$")


def paragraphs_of(text: str) -> list[tuple[str, int, int]]:
    """(paragraph, first line number, line count): blank lines part paragraphs; with no blank line at all,
    each line is one. Hard-wrapped lines are joined with a space."""
    lines = text.split("\n")
    blank_separated = any(not line.strip() for line in lines[1:-1])
    found, current, start = [], [], 0
    for number, line in enumerate(lines, 1):
        if line.strip() and not (current and not blank_separated):
            if not current:
                start = number
            current.append(line.strip())
            continue
        if current:
            found.append((" ".join(current), start, len(current)))
            current = []
        if line.strip():
            start, current = number, [line.strip()]
    if current:
        found.append((" ".join(current), start, len(current)))
    return found


def chapter_heading(paragraph: str, lines: int) -> tuple[str, str | None] | None:
    """(the chapter line, its title on the same line or None) where a paragraph is a chapter line, else None."""
    if lines != 1 or len(paragraph) > MAX_CHAPTER_LINE:
        return None
    match = CHAPTER_LINE.match(paragraph)
    if match:
        title = match.group("title") or match.group("rest")
        if match.group("rest") and _SENTENCE_END.search(match.group("rest")):
            return None  # "Part of me wanted to stay." is a sentence
        return paragraph, title
    if LONE_NUMBER.match(paragraph) and paragraph != "I":  # "I" alone is a word
        return paragraph, None
    return None


def _spoken_case(title: str) -> str:
    """An all-capitals title in title case ("CHAPTER XII: THE STORM" -> "Chapter XII: The Storm"), its roman
    numerals kept, so a voice reads words, not letters."""
    if title != title.upper() or not any(c.isalpha() for c in title):
        return title
    return " ".join(word if LONE_NUMBER.match(word.rstrip(":.")) else word.capitalize() for word in title.split())


def read_text_book(data: bytes | str, choices: ReadingChoices, source: str) -> Book:
    paragraphs = paragraphs_of(decode(data, source))
    chapters: list[Chapter] = []
    front: list[str] = []
    title, paragraphs_now, where, expecting_title = None, [], "", False
    for text, line, count in paragraphs:
        heading = chapter_heading(text, count)
        if heading is not None:
            if title is not None:
                chapters.append(Chapter(title, tuple(paragraphs_now), kind_of(None, title) or "chapter", where))
            elif paragraphs_now:
                front = list(paragraphs_now)
            title = _spoken_case(heading[0])
            paragraphs_now, where, expecting_title = [], f"line {line}", heading[1] is None
            continue
        if expecting_title and count == 1 and len(text) <= MAX_CHAPTER_LINE and not _SENTENCE_END.search(text):
            text = _spoken_case(text)
            title = f"{title}: {text}" if not title.endswith((":", ".")) else f"{title} {text}"
        else:
            paragraphs_now.append(text)
        expecting_title = False
    if title is not None:
        chapters.append(Chapter(title, tuple(paragraphs_now), kind_of(None, title) or "chapter", where))
    else:
        front = []
        chapters.append(Chapter("", tuple(paragraphs_now), "chapter", "line 1"))
    book_title, author = _title_page(front)
    if front:
        kind = "titlepage" if book_title is not None else "chapter"
        chapters.insert(0, Chapter("" if kind == "chapter" else book_title, tuple(front), kind, "line 1"))
    kept, left_out = kept_chapters(chapters, choices, source)
    return Book(book_title or untitled(source), kept, author, source=source, left_out=left_out)


_BY = re.compile(r"^(?:by|von|par|por|di|de|door)\s+(.+)$", re.I)


def _title_page(front: list[str]) -> tuple[str | None, str | None]:
    """(title, author) where what comes before the first chapter is a few short lines, else (None, None)."""
    if not front or len(front) > 4 or any(len(p) > MAX_CHAPTER_LINE or _SENTENCE_END.search(p) and not _BY.match(p)
                                          for p in front):
        return None, None
    author = next((m.group(1).strip() for m in map(_BY.match, front) if m), None)
    return front[0], author
