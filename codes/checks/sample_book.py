"""A book written here, in every format books come in, for the tests and bench/audiobook_bench.py (no text
can be downloaded on the build machines): chapters of a plain story with dialogue in quotation marks, and
around them what real books carry and a reader must leave out: a cover, a title page, a copyright page,
a table of contents, page numbers and footnotes.

sample_book(words) gives the text; write_epub / markdown / html / plain_text give each format of it.
"""

from __future__ import annotations

import io
import struct
import zlib
from dataclasses import dataclass

NARRATION = (
    "The harbour was quiet in the early morning, and the boats rocked gently against the wall.",
    "Mara walked along the quay with her hands in her pockets, counting the gulls on the roofs.",
    "Nobody in the village remembered a winter as long as this one.",
    "The baker had already lit his ovens, and the smell of bread drifted down to the water.",
    "She stopped at the end of the pier and looked out at the grey line of the sea.",
    "Somewhere beyond it was the island her grandfather had talked about all his life.",
    "The wind changed, and the first drops of rain began to fall on the stones.",
    "Tom was waiting by the old lighthouse, a lantern in one hand and a map in the other.",
)
DIALOGUE = (
    ("Are you ready?", "he asked."),
    ("I have been ready for years,", "she said."),
    ("Then we leave tonight.", "he answered."),
    ("What if the weather turns?", "she asked."),
)
TITLES = ("The Harbour", "The Map", "The Crossing", "The Island", "The Lighthouse", "The Storm", "The Return",
          "The Letter", "The Winter", "The Morning")


@dataclass(frozen=True)
class SampleChapter:
    title: str
    paragraphs: tuple[str, ...]


@dataclass(frozen=True)
class SampleBook:
    title: str
    author: str
    language: str
    chapters: tuple[SampleChapter, ...]

    @property
    def words(self) -> int:
        return sum(len(p.split()) for c in self.chapters for p in c.paragraphs)


def sample_book(words: int = 600, chapters: int = 3, title: str = "The Winter Harbour",
                author: str = "Ada Writer") -> SampleBook:
    """About `words` words over `chapters` chapters; every third paragraph holds dialogue in “ ”."""
    per_chapter = max(1, words // chapters)
    made, index = [], 0
    for number in range(chapters):
        paragraphs, count = [], 0
        while count < per_chapter:
            if len(paragraphs) % 3 == 2:
                line, tag = DIALOGUE[index % len(DIALOGUE)]
                paragraph = f"“{line}” {tag} {NARRATION[index % len(NARRATION)]}"
            else:
                paragraph = " ".join(NARRATION[(index + k) % len(NARRATION)] for k in range(2))
            paragraphs.append(paragraph)
            count += len(paragraph.split())
            index += 1
        made.append(SampleChapter(f"Chapter {number + 1}: {TITLES[number % len(TITLES)]}", tuple(paragraphs)))
    return SampleBook(title, author, "en", tuple(made))


# A longer book's sentences, composed from parts (bench/audiobook_bench.py): every sentence its own, of 8 to
# 30 words, as a novel's vary, so no two segments of the ledger are one.
_WHO = ("Mara", "Tom", "the old baker", "the harbour master", "her grandfather", "a fisherman from the north",
        "the girl with the red scarf", "nobody in the village", "the two of them", "the lighthouse keeper")
_DID = ("walked slowly along", "looked out across", "remembered the winter on", "talked for hours about",
        "had never seen anything like", "came back at dawn to", "kept a careful record of", "drew a small map of",
        "argued quietly about", "waited in silence beside")
_WHAT = ("the grey harbour wall", "the island beyond the fog", "the boats that rocked against the pier",
         "the narrow road to the cliffs", "the bakery with its warm windows", "the lantern in the tower",
         "the letters hidden in the drawer", "the long line of the sea", "the storm that had come in the night",
         "the bells of the small chapel")
_THEN = ("", "while the rain fell on the stones", "before anyone else was awake", "as the wind changed direction",
         "and the gulls circled above the roofs", "though nobody could say why", "until the light began to fade",
         "because there was nothing else to do", "and thought about the years that had passed")


def novel(words: int = 10_000, chapters: int = 10, seed: int = 0) -> SampleBook:
    """About `words` words over `chapters` chapters of composed, varied sentences; paragraphs of 2 to 5
    sentences, every fourth with a line of dialogue in “ ”."""
    import random

    rng = random.Random(seed)
    per_chapter = max(1, words // chapters)
    made = []
    for number in range(chapters):
        paragraphs, count = [], 0
        while count < per_chapter:
            sentences = []
            for _ in range(rng.randint(2, 5)):
                then = rng.choice(_THEN)
                sentence = f"{rng.choice(_WHO)} {rng.choice(_DID)} {rng.choice(_WHAT)}{' ' + then if then else ''}."
                sentences.append(sentence[0].upper() + sentence[1:])
            if len(paragraphs) % 4 == 3:
                line, tag = DIALOGUE[rng.randrange(len(DIALOGUE))]
                sentences.insert(0, f"“{line}” {tag}")
            paragraphs.append(" ".join(sentences))
            count += len(paragraphs[-1].split())
        made.append(SampleChapter(f"Chapter {number + 1}: {TITLES[number % len(TITLES)]}", tuple(paragraphs)))
    return SampleBook("The Long Winter Harbour", "Ada Writer", "en", tuple(made))


def cover_png(width: int = 64, height: int = 96) -> bytes:
    """A plain PNG cover (a blue field), made with zlib alone."""
    row = b"\x00" + bytes((40, 70, 140)) * width
    raw = row * height

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


def _chapter_xhtml(chapter: SampleChapter, number: int, heading: str = "h1") -> str:
    """A chapter as a publisher writes it: its heading, paragraphs, a page break and a footnote marker."""
    body = [f'<section epub:type="chapter"><{heading}>{chapter.title}</{heading}>']
    for index, paragraph in enumerate(chapter.paragraphs):
        marker = f'<a epub:type="noteref" href="#fn{number}">{number}</a>' if index == 0 else ""
        body.append(f"<p>{paragraph}{marker}</p>")
        if index == 1:
            body.append(f'<span epub:type="pagebreak" id="page{number}{index}" role="doc-pagebreak">{number * 10 + index}</span>')
    body.append(f'<aside epub:type="footnote" id="fn{number}"><p>A note the listener never hears.</p></aside>')
    body.append("</section>")
    return "".join(body)


def write_epub(book: SampleBook, version: int = 3) -> bytes:
    """The book as an EPUB 3 (nav with landmarks) or EPUB 2 (NCX, guide): a cover, a title page, a copyright
    page, a contents page and the chapters."""
    from ebooklib import epub

    out = epub.EpubBook()
    out.set_identifier("omnivoice-sample-book")
    out.set_title(book.title)
    out.set_language(book.language)
    out.add_author(book.author)
    out.set_cover("cover.png", cover_png(), create_page=True)
    title_page = epub.EpubHtml(title="Title page", file_name="title.xhtml", lang=book.language)
    title_page.content = f'<section epub:type="titlepage"><h1>{book.title}</h1><p>by {book.author}</p></section>'
    copyright_page = epub.EpubHtml(title="Copyright", file_name="copyright.xhtml", lang=book.language)
    copyright_page.content = '<section epub:type="copyright-page"><p>Copyright 2026. All rights reserved.</p></section>'
    contents = epub.EpubHtml(title="Contents", file_name="contents.xhtml", lang=book.language)
    contents.content = "<h1>Contents</h1>" + "".join(f"<p>{c.title}</p>" for c in book.chapters)
    chapters = []
    for number, chapter in enumerate(book.chapters, 1):
        page = epub.EpubHtml(title=chapter.title, file_name=f"chapter{number:02d}.xhtml", lang=book.language)
        page.content = _chapter_xhtml(chapter, number)
        chapters.append(page)
    for page in (title_page, copyright_page, contents, *chapters):
        out.add_item(page)
    out.toc = tuple(epub.Link(page.file_name, page.title, f"toc{n}") for n, page in enumerate(chapters))
    out.guide = [{"href": "title.xhtml", "title": "Title page", "type": "title-page"},
                 {"href": "copyright.xhtml", "title": "Copyright", "type": "copyright-page"},
                 {"href": "contents.xhtml", "title": "Contents", "type": "toc"}]
    out.add_item(epub.EpubNcx())
    if version == 3:
        out.add_item(epub.EpubNav())
    out.spine = ["cover", title_page, copyright_page, contents, *chapters]
    buffer = io.BytesIO()
    epub.write_epub(buffer, out, {"epub3_landmark": version == 3, "epub3_pages": False,
                                  **({} if version == 3 else {"package_direction": False})})
    data = buffer.getvalue()
    return data if version == 3 else _as_epub2(data)


def _as_epub2(data: bytes) -> bytes:
    """An EPUB 3 package made into an EPUB 2 one: version 2.0 and no nav document, so only the NCX navigates."""
    import re
    import zipfile

    source = zipfile.ZipFile(io.BytesIO(data))
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as target:
        for info in source.infolist():
            content = source.read(info.filename)
            if info.filename.endswith(".opf"):
                text = content.decode("utf-8").replace('version="3.0"', 'version="2.0"')
                text = re.sub(r'<item[^>]*properties="nav"[^>]*/>', "", text)
                text = re.sub(r'<itemref idref="nav"[^>]*/>', "", text)
                content = text.encode("utf-8")
            if info.filename.endswith("nav.xhtml"):
                continue
            compress = zipfile.ZIP_STORED if info.filename == "mimetype" else zipfile.ZIP_DEFLATED
            target.writestr(info, content, compress_type=compress)
    return buffer.getvalue()


def markdown(book: SampleBook) -> str:
    lines = [f"---\ntitle: {book.title}\nauthor: {book.author}\nlanguage: {book.language}\n---\n"]
    for number, chapter in enumerate(book.chapters, 1):
        lines.append(f"## {chapter.title}\n")
        for index, paragraph in enumerate(chapter.paragraphs):
            lines.append(paragraph + (f"[^{number}]" if index == 0 else "") + "\n")
        lines.append(f"[^{number}]: A note the listener never hears.\n")
    return "\n".join(lines)


def html(book: SampleBook) -> str:
    body = [f"<h1>{book.title}</h1>", "<nav><ol>" + "".join(f"<li>{c.title}</li>" for c in book.chapters) + "</ol></nav>"]
    for number, chapter in enumerate(book.chapters, 1):
        # HTML marks notes and page numbers with DPUB-ARIA roles where EPUB has epub:type
        body.append(_chapter_xhtml(chapter, number, "h2").replace('epub:type="noteref"', 'role="doc-noteref"').replace(
            'epub:type="footnote"', 'role="doc-footnote"').replace('epub:type="pagebreak" ', "").replace(
            ' epub:type="chapter"', ""))
    return (f'<!DOCTYPE html><html lang="{book.language}"><head><title>{book.title}</title>'
            f'<meta name="author" content="{book.author}"></head><body>{"".join(body)}</body></html>')


def plain_text(book: SampleBook) -> str:
    """As Project Gutenberg prints one: a title page, then "CHAPTER I" and its title on lines of their own,
    paragraphs hard-wrapped at 70 columns."""
    import textwrap

    parts = [book.title, f"by {book.author}"]
    for number, chapter in enumerate(book.chapters, 1):
        heading = chapter.title.split(": ", 1)[-1]
        parts += [f"CHAPTER {_roman(number)}", heading.upper()]
        parts += [textwrap.fill(p, 70) for p in chapter.paragraphs]
    return "\n\n".join(parts) + "\n"


def _roman(number: int) -> str:
    out = ""
    for value, letters in ((10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
        while number >= value:
            out, number = out + letters, number - value
    return out
