"""What a book is once read: its metadata and its chapters, each a title and paragraphs of plain text.

Every reader (epub.py, markup.py for HTML and Markdown, plaintext.py) makes a Book; reading.py turns one
into a Script. A chapter's kind says what part of the book it is (front matter, a chapter, back matter),
so that `--skip` can leave parts out by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from codes.common.errors import UserError

# The parts of a book a reader can tell apart. "chapter" is the body; the rest are what EPUB's structural
# vocabulary (epub:type, landmarks, the EPUB 2 guide) and common titles name.
KINDS = ("chapter", "cover", "titlepage", "copyright", "toc", "dedication", "epigraph", "foreword", "preface",
         "introduction", "prologue", "epilogue", "afterword", "acknowledgments", "about", "appendix", "notes",
         "bibliography", "index", "colophon")
# Left out unless asked for: what a listener never hears read in an audiobook.
DEFAULT_SKIP = frozenset({"cover", "titlepage", "copyright", "toc", "index", "colophon", "bibliography", "notes"})


@dataclass(frozen=True)
class Chapter:
    title: str  # "" where the book gives none
    paragraphs: tuple[str, ...]
    kind: str = "chapter"
    where: str = ""  # where it came from, for messages: "chapter03.xhtml", "line 120"


@dataclass(frozen=True)
class Book:
    title: str
    chapters: tuple[Chapter, ...]
    author: str | None = None
    language: str | None = None  # as the book gives it ("en-GB"); None: unknown
    cover: bytes | None = None
    cover_type: str | None = None  # the cover's media type ("image/jpeg")
    source: str = "book"
    left_out: tuple[str, ...] = field(default=())  # what reading left out, for the user: "copyright (copyright.xhtml)"


@dataclass(frozen=True)
class ReadingChoices:
    """What a reader leaves out (docs/books.md): the parts of the book by kind, and within the text the table
    of contents, page numbers and footnote markers and notes (each kept where its flag asks)."""

    skip: frozenset[str] = DEFAULT_SKIP
    toc: bool = False
    page_numbers: bool = False
    footnotes: bool = False


def untitled(source: str) -> str:
    """The title of a book that gives none: its file's name without the extension."""
    from pathlib import PurePath

    return PurePath(source).stem or source


def parse_skip(value: str | None) -> frozenset[str]:
    """--skip KIND,KIND,... ("none": nothing; unset: DEFAULT_SKIP) -> the kinds, each checked."""
    if value is None:
        return DEFAULT_SKIP
    names = [name.strip().lower() for name in value.split(",") if name.strip()]
    if names == ["none"]:
        return frozenset()
    unknown = [name for name in names if name not in KINDS or name == "chapter"]
    if unknown or not names:
        raise UserError(f"--skip takes parts of a book separated by commas, or none; {unknown[0] if unknown else value!r} "
                        f"is not one (parts: {', '.join(k for k in KINDS if k != 'chapter')})")
    return frozenset(names)


def kept_chapters(chapters, choices: ReadingChoices, source: str) -> tuple[tuple[Chapter, ...], tuple[str, ...]]:
    """The chapters to read (the skipped kinds and the empty ones out) and a word on each left out."""
    kept, left_out = [], []
    for chapter in chapters:
        if chapter.kind in choices.skip:
            left_out.append(f"{chapter.kind} ({chapter.title or chapter.where})")
        elif any(p.strip() for p in chapter.paragraphs):  # a heading alone (a part's title page) is no chapter
            kept.append(chapter)
    if not kept:
        fix = f" once {', '.join(sorted(choices.skip))} are left out; see --skip" if left_out else \
            "; is it the right file?"
        raise UserError(f"{source} has no text to read{fix}")
    return tuple(kept), tuple(left_out)
