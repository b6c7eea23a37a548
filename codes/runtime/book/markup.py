"""HTML, XHTML and Markdown into a book's blocks: headings and paragraphs of plain text.

One walker for every markup a book comes in (an EPUB's documents, an HTML file, Markdown rendered to HTML
by markdown-it-py). It leaves out what is not read aloud: scripts, styles and navigation always; the table
of contents, page numbers (epub:type/role pagebreak, Gutenberg's pagenum spans) and footnote markers and
notes (noteref, footnote, endnotes) unless ReadingChoices keeps them. A heading and a paragraph are blocks;
an element with an id that starts a chapter (a navigation target) is a mark before its blocks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from codes.runtime.script import decode
from codes.runtime.book.model import Book, Chapter, ReadingChoices, kept_chapters, untitled

BLOCKS = {"p", "div", "li", "blockquote", "pre", "dd", "dt", "figcaption", "td", "th", "section", "article",
          "aside", "header", "footer", "main", "body", "tr", "ul", "ol", "dl", "table", "figure", "hr"}
HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
NEVER_READ = {"script", "style", "head", "title", "img", "svg", "math", "audio", "video", "object", "iframe",
              "template", "noscript", "button", "input", "select", "textarea"}
PAGE_BREAK = {"pagebreak", "doc-pagebreak"}
NOTE_MARKER = {"noteref", "doc-noteref", "biblioref", "doc-biblioref", "footnote-ref"}  # footnote-ref: pandoc's
NOTES = {"footnote", "footnotes", "endnote", "endnotes", "rearnote", "rearnotes", "doc-footnote", "doc-endnote",
         "doc-endnotes", "note"}
TOC = {"toc", "doc-toc", "landmarks", "page-list", "doc-pagelist"}
_SPACE = re.compile(r"\s+")
_GUTENBERG_PAGE = re.compile(r"\bpage(num|no|number)\b", re.I)
_NOTE_HREF = re.compile(r"#(fn|note|footnote|endnote|en|ftn)[-_:]?\w*", re.I)

# A heading's or a section's epub:type/role, or its title's words, naming the part of the book.
STRUCTURE = {"cover": "cover", "titlepage": "titlepage", "halftitlepage": "titlepage", "copyright-page": "copyright",
             "toc": "toc", "dedication": "dedication", "epigraph": "epigraph", "foreword": "foreword",
             "preface": "preface", "introduction": "introduction", "prologue": "prologue", "epilogue": "epilogue",
             "afterword": "afterword", "acknowledgments": "acknowledgments", "appendix": "appendix",
             "endnotes": "notes", "footnotes": "notes", "rearnotes": "notes", "bibliography": "bibliography",
             "index": "index", "colophon": "colophon", "title-page": "titlepage", "copyright": "copyright",
             "contributors": "about"}
TITLE_WORDS = [(re.compile(p, re.I), kind) for p, kind in (
    (r"^(table of )?contents$|^inhalt(sverzeichnis)?$|^(table des matières|sommaire)$|^índice$|^indice$|^содержание$|^目录$|^目次$", "toc"),
    (r"^copyright\b|^impressum$|^mentions légales$", "copyright"),
    (r"^index$|^register$", "index"),
    (r"^colophon$|^kolophon$", "colophon"),
    (r"^(end)?notes$|^footnotes$|^anmerkungen$", "notes"),
    (r"^bibliography$|^references$|^literatur(verzeichnis)?$|^bibliographie$", "bibliography"),
    (r"^acknowledge?ments?$|^danksagung$|^remerciements$|^agradecimientos$", "acknowledgments"),
    (r"^about the author$|^über (den|die) autor(in)?$|^à propos de l'auteur$", "about"),
    (r"^dedication$|^widmung$", "dedication"),
    (r"^(prologue|prolog|prólogo|prologo|пролог|序章|プロローグ)\b", "prologue"),
    (r"^(epilogue|epilog|épilogue|epílogo|epilogo|эпилог|尾声|エピローグ)\b", "epilogue"),
    (r"^(foreword|vorwort|avant-propos)$", "foreword"),
    (r"^(preface|préface|prefacio|prefazione|prefácio|предисловие)$", "preface"),
    (r"^(afterword|nachwort|postface)$", "afterword"),
    (r"^(introduction|einleitung|introducción|introduzione|введение)$", "introduction"),
    (r"^appendix\b|^anhang\b|^annexe\b", "appendix"),
)]


@dataclass(frozen=True)
class Block:
    """One heading (level 1-6) or paragraph (level 0); a section of a named kind starting (level -1, `kind`);
    or a chapter mark (`anchor`: the id a chapter starts at)."""

    text: str = ""
    level: int = 0
    anchor: str | None = None
    kind: str | None = None  # the part of the book its section says it is (epub:type), if any


def kind_of(types: str | None = None, title: str = "") -> str | None:
    """A part of the book from an epub:type/role value, else from a title's words; None: neither says."""
    for word in (types or "").replace("doc-", "").split():
        if word in STRUCTURE:
            return STRUCTURE[word]
    title = _SPACE.sub(" ", title).strip().rstrip(".:")
    return next((kind for pattern, kind in TITLE_WORDS if pattern.search(title)), None)


def _types(element) -> set[str]:
    words = " ".join(element.get(name) or "" for name in ("epub:type", "role", "type", "class"))
    if element.get("class") and _GUTENBERG_PAGE.search(element.get("class")):
        words += " pagebreak"
    return set(words.split())


def _left_out(element, choices: ReadingChoices) -> bool:
    tag = element.tag if isinstance(element.tag, str) else ""
    if tag in NEVER_READ or tag == "nav" and not choices.toc:
        return True
    types = _types(element)
    if not choices.page_numbers and types & PAGE_BREAK:
        return True
    if not choices.toc and types & TOC:
        return True
    if not choices.footnotes:
        if types & NOTES or types & NOTE_MARKER:
            return True
        # A footnote marker without its type: a superscript link into the notes ("<sup><a href="#fn3">3</a></sup>").
        if tag in ("sup", "a") and _NOTE_HREF.search(" ".join(a.get("href") or "" for a in element.iter("a"))):
            return True
    return False


def _local(tag) -> str:
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


def html_blocks(data: bytes | str, choices: ReadingChoices, anchors=frozenset()) -> tuple[list[Block], dict]:
    """An HTML or XHTML document's blocks in reading order, and what its <head> says (title, author, language).
    anchors: the ids a chapter starts at (a Block with that anchor comes before the element's blocks)."""
    import lxml.html

    if isinstance(data, str):
        data = data.encode("utf-8")
    try:  # UTF-8 unless the document says otherwise (lxml alone would guess Latin-1 without a <meta charset>)
        data.decode("utf-8")
        parser = lxml.html.HTMLParser(encoding="utf-8")
    except UnicodeDecodeError:
        parser = None
    try:
        root = lxml.html.document_fromstring(data, parser=parser) if data.strip() else None
    except Exception:  # lxml raises ParserError and ValueError alike for what it cannot parse
        root = None
    if root is None:
        return [], {}
    for element in root.iter():  # XHTML's namespaced tags as plain HTML ones
        element.tag = _local(element.tag)
    head = {"title": " ".join((root.findtext(".//title") or "").split()) or None,
            "language": root.get("lang") or root.get("xml:lang") or root.get("{http://www.w3.org/XML/1998/namespace}lang"),
            "author": next((m.get("content") for m in root.iter("meta") if (m.get("name") or "").lower() == "author"), None)}
    body = root.find("body")
    blocks: list[Block] = []
    parts: list[str] = []

    def flush():
        text = _SPACE.sub(" ", "".join(parts)).strip()
        parts.clear()
        if text:
            blocks.append(Block(text))

    def walk(element, section_kind=None):
        if _left_out(element, choices):
            return
        tag = element.tag
        if element.get("id") in anchors:
            flush()
            blocks.append(Block(anchor=element.get("id")))
        kind = kind_of(" ".join(_types(element))) if tag in ("section", "body", "div", "aside", "article") else None
        if kind and kind != section_kind:
            flush()
            blocks.append(Block(kind=kind, level=-1))  # a section of this kind starts
            section_kind = kind
        if tag in HEADINGS:
            flush()
            text = _SPACE.sub(" ", _text(element, choices)).strip()
            if text:
                blocks.append(Block(text, HEADINGS[tag]))
            return
        if tag == "br":  # a line break inside a paragraph (verse, an address) is a space, not a new paragraph
            parts.append(" ")
        block = tag in BLOCKS
        if block:
            flush()
        if element.text:
            parts.append(element.text)
        for child in element:
            walk(child, section_kind)
            if child.tail:
                parts.append(child.tail)
        if block:
            flush()

    if body is not None:
        walk(body)
    flush()
    return blocks, head


def _text(element, choices: ReadingChoices) -> str:
    """An element's text, without what is left out inside it (a footnote marker in a heading)."""
    pieces = [element.text or ""]
    for child in element:
        if not _left_out(child, choices) and isinstance(child.tag, str):
            pieces.append(" " if child.tag == "br" else _text(child, choices))
        pieces.append(child.tail or "")
    return "".join(pieces)


def chapter_level(blocks: list[Block]) -> int | None:
    """The heading level chapters begin at: the highest level used more than once, or with one top heading
    (the book's title) and several below it, the level below; None: no headings."""
    levels = sorted({b.level for b in blocks if b.level > 0})
    if not levels:
        return None
    counts = {level: sum(1 for b in blocks if b.level == level) for level in levels}
    if counts[levels[0]] == 1 and len(levels) > 1:
        return levels[1]
    return levels[0]


def chapters_by_heading(blocks: list[Block], where: str, default_title: str = "") -> tuple[list[Chapter], str | None]:
    """Blocks cut into chapters at the chapter level's headings; a lone higher heading above them is the
    book's title (returned). Text before the first chapter heading is a chapter of its own."""
    level = chapter_level(blocks)
    book_title = None
    chapters: list[Chapter] = []
    title, kind, paragraphs = default_title, None, []

    def close():
        if paragraphs or title != default_title:
            chapters.append(Chapter(title, tuple(paragraphs), kind or kind_of(None, title) or "chapter", where))

    for block in blocks:
        if block.level == -1:
            if not paragraphs:  # a section's kind names its chapter only where it opens it
                kind = kind or block.kind
        elif level is not None and 0 < block.level < level:
            book_title = book_title or block.text
        elif block.level == level:
            close()
            title, kind, paragraphs = block.text, None, []
        elif block.text:
            paragraphs.append(block.text)
    close()
    return chapters, book_title


def read_html(data: bytes, choices: ReadingChoices, source: str) -> Book:
    blocks, head = html_blocks(data, choices)
    chapters, heading_title = chapters_by_heading(blocks, source)
    kept, left_out = kept_chapters(chapters, choices, source)
    return Book(head.get("title") or heading_title or untitled(source), kept, head.get("author"), head.get("language"),
                source=source, left_out=left_out)


_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.S)


def read_markdown(data: bytes, choices: ReadingChoices, source: str) -> Book:
    """Markdown: its headings are chapters (rendered by markdown-it-py, then read as HTML); a YAML-style
    front matter's title, author and language are the book's. Footnotes ([^1] and their lines) go with
    --read_footnotes."""
    from markdown_it import MarkdownIt

    text = decode(data, source)
    meta = {}
    front = _FRONT_MATTER.match(text)
    if front:
        for line in front.group(1).splitlines():
            key, _, value = line.partition(":")
            if value.strip():
                meta[key.strip().lower()] = value.strip().strip("\"'")
        text = text[front.end():]
    if not choices.footnotes:
        text = re.sub(r"(?m)^\[\^[^\]]+\]:.*(\n[ \t]+.*)*", "", text)
        text = re.sub(r"\[\^[^\]]+\]", "", text)
    html = MarkdownIt("commonmark").render(text)
    blocks, _ = html_blocks(f"<html><body>{html}</body></html>", choices)
    chapters, heading_title = chapters_by_heading(blocks, source)
    kept, left_out = kept_chapters(chapters, choices, source)
    return Book(meta.get("title") or heading_title or untitled(source), kept, meta.get("author"),
                meta.get("language") or meta.get("lang"), source=source, left_out=left_out)
