"""EPUB 2 and 3 into a Book, with ebooklib: the spine in order, chapters where the navigation (the EPUB 3
nav, else the NCX) points, titled as it titles them (else by their first heading), the parts of the book
from the landmarks, the EPUB 2 guide and epub:type, and the title, author, language and cover from the
package's metadata.

Refused before any work, each in one line: a file that is not a zip or is damaged (a bad CRC), one locked
with DRM (META-INF/encryption.xml encrypting anything but fonts, or a rights.xml/sinf.xml), and a book with
nothing to read.
"""

from __future__ import annotations

import io
import posixpath
import zipfile
from dataclasses import dataclass, field
from urllib.parse import unquote, urldefrag

from codes.common.errors import UserError
from codes.runtime.book.markup import Block, html_blocks, kind_of
from codes.runtime.book.model import Book, Chapter, ReadingChoices, kept_chapters

# Encryption that only obfuscates embedded fonts (IDPF's and Adobe's): the text is readable.
FONT_OBFUSCATION = {"http://www.idpf.org/2008/embedding", "http://ns.adobe.com/pdf/enc#RC"}
DRM_FILES = ("META-INF/rights.xml", "META-INF/sinf.xml")
GUIDE_KINDS = {"cover": "cover", "title-page": "titlepage", "toc": "toc", "copyright-page": "copyright",
               "dedication": "dedication", "epigraph": "epigraph", "foreword": "foreword", "preface": "preface",
               "acknowledgements": "acknowledgments", "acknowledgments": "acknowledgments", "index": "index",
               "colophon": "colophon", "bibliography": "bibliography", "notes": "notes", "glossary": "appendix",
               "loi": "toc", "lot": "toc", "titlepage": "titlepage"}


def open_epub(data: bytes, source: str) -> zipfile.ZipFile:
    """The EPUB's zip, checked whole: a damaged or DRM-locked book is refused here."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        damaged = archive.testzip()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError, ValueError) as exc:
        raise UserError(f"{source} is not a readable EPUB ({exc or 'not a zip'}); is the file whole?") from None
    if damaged is not None:
        raise UserError(f"{source} is damaged ({damaged} fails its checksum); download or export it again")
    names = set(archive.namelist())
    if "META-INF/container.xml" not in names:
        raise UserError(f"{source} is a zip but not an EPUB (no META-INF/container.xml)")
    locked = [name for name in DRM_FILES if name in names]
    if "META-INF/encryption.xml" in names:
        locked += _encrypted(archive.read("META-INF/encryption.xml"))
    if locked:
        raise UserError(f"{source} is locked with DRM ({locked[0]}); only books without DRM can be read: "
                        "use the publisher's DRM-free file")
    return archive


def _encrypted(xml: bytes) -> list[str]:
    """The files encryption.xml encrypts with anything but font obfuscation."""
    from lxml import etree

    try:
        root = etree.fromstring(xml)
    except etree.XMLSyntaxError:
        return ["META-INF/encryption.xml (unreadable)"]
    found = []
    for data in root.iter("{http://www.w3.org/2001/04/xmlenc#}EncryptedData"):
        method = data.find("{http://www.w3.org/2001/04/xmlenc#}EncryptionMethod")
        if method is None or method.get("Algorithm") not in FONT_OBFUSCATION:
            reference = data.find(".//{http://www.w3.org/2001/04/xmlenc#}CipherReference")
            found.append(reference.get("URI") if reference is not None else "META-INF/encryption.xml")
    return found


def read_epub(data: bytes, choices: ReadingChoices, source: str) -> Book:
    import ebooklib
    from ebooklib import epub

    open_epub(data, source).close()
    try:
        book = epub.read_epub(io.BytesIO(data), {"ignore_ncx": False})
    except Exception as exc:  # ebooklib raises EpubException, KeyError and lxml's errors for a broken package
        raise UserError(f"{source} is not a readable EPUB ({type(exc).__name__}: {str(exc)[:80]}); "
                        "is the file whole?") from None
    targets = _toc_targets(book.toc)
    kinds = _part_kinds(book, ebooklib)
    chapters: list[Chapter] = []
    for idref, linear in book.spine:
        item = book.get_item_with_id(idref)
        if item is None or item.get_type() not in (ebooklib.ITEM_DOCUMENT, ebooklib.ITEM_NAVIGATION):
            continue
        name = item.get_name()
        if item.get_type() == ebooklib.ITEM_NAVIGATION or isinstance(item, epub.EpubNav):
            kind = "toc"
        else:
            # Off the reading order (linear="no"): the cover page, or notes a reader pops up.
            kind = kinds.get(name) or (("cover" if "cover" in name.lower() else "notes") if linear == "no" else None)
        here = targets.get(name, {})
        blocks, _ = html_blocks(item.get_content(), choices, anchors=frozenset(f for f in here if f))
        _add_file(chapters, blocks, here, kind, name)
    kept, left_out = kept_chapters(chapters, choices, source)
    title = _first(book, "title") or kept[0].title or source
    cover, cover_type = _cover(book, ebooklib)
    return Book(title, kept, _first(book, "creator"), _first(book, "language"), cover, cover_type, source, left_out)


def _add_file(chapters: list[Chapter], blocks: list[Block], targets: dict, kind: str | None, name: str) -> None:
    """One spine document's blocks onto the chapters: a new chapter where the navigation points (the file, or
    an anchor in it), or at its first heading where it has none; else it continues the chapter before (a
    chapter split over files). The chapter's own heading is its title, not a paragraph."""
    # A file the navigation lists, or one the landmarks or guide name a part of the book, opens a chapter.
    runs = [_Run(targets.get(None), targets.get(None) is not None or not chapters or kind is not None)]
    for block in blocks:
        run = runs[-1]
        if block.anchor is not None:
            if run.paragraphs:
                runs.append(_Run(targets.get(block.anchor), True))
            else:
                run.title, run.new = run.title or targets.get(block.anchor), True
        elif block.level == -1:
            run.section_kind = run.section_kind or block.kind
            run.new = run.new or not run.paragraphs  # a section of its own kind (epub:type) opens the file
        elif block.level > 0 and not run.paragraphs and run.title is None:
            run.title, run.new = block.text, True
        elif block.level > 0 and not run.paragraphs and _same(block.text, run.title):
            continue
        elif block.text:
            run.paragraphs.append(block.text)
    for run in runs:
        if run.new or not chapters:
            chapters.append(Chapter(run.title or "", tuple(run.paragraphs),
                                    kind or run.section_kind or kind_of(None, run.title or "") or "chapter", name))
        else:
            last = chapters[-1]
            chapters[-1] = Chapter(last.title, last.paragraphs + tuple(run.paragraphs), last.kind, last.where)


@dataclass
class _Run:
    """Blocks of one file that go to one chapter: a new one (titled, or by its first heading) or the last."""

    title: str | None
    new: bool
    paragraphs: list[str] = field(default_factory=list)
    section_kind: str | None = None


def _same(a: str, b: str | None) -> bool:
    return b is not None and " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def _toc_targets(toc) -> dict[str, dict[str | None, str]]:
    """The navigation's entries by file: {file: {fragment or None: title}}, in reading order, nested flattened."""
    from ebooklib import epub

    targets: dict[str, dict] = {}

    def visit(entries):
        for entry in entries:
            if isinstance(entry, tuple):
                section, children = entry
                if getattr(section, "href", None):
                    add(section.href, section.title)
                visit(children)
            elif isinstance(entry, (epub.Link, epub.EpubHtml)):
                add(getattr(entry, "href", None) or entry.file_name, entry.title)
            elif isinstance(entry, epub.Section) and entry.href:
                add(entry.href, entry.title)

    def add(href, title):
        path, fragment = urldefrag(unquote(href or ""))
        if path:
            targets.setdefault(posixpath.normpath(path), {}).setdefault(fragment or None, " ".join((title or "").split()))

    visit(toc)
    return targets


def _part_kinds(book, ebooklib) -> dict[str, str]:
    """Each file's part of the book as the EPUB 2 guide and the EPUB 3 landmarks name it."""
    import lxml.html

    kinds = {}
    for entry in book.guide or ():
        path = posixpath.normpath(urldefrag(unquote(entry.get("href") or ""))[0])
        if entry.get("type") in GUIDE_KINDS and path:
            kinds.setdefault(path, GUIDE_KINDS[entry["type"]])
    for nav in book.get_items_of_type(ebooklib.ITEM_NAVIGATION):
        try:
            root = lxml.html.document_fromstring(nav.get_content())
        except Exception:
            continue
        folder = posixpath.dirname(nav.get_name())
        for landmarks in root.iter("{http://www.w3.org/1999/xhtml}nav", "nav"):
            if "landmarks" not in (landmarks.get("epub:type") or ""):
                continue
            for link in landmarks.iter("{http://www.w3.org/1999/xhtml}a", "a"):
                kind = kind_of(link.get("epub:type"))
                path = posixpath.normpath(posixpath.join(folder, urldefrag(unquote(link.get("href") or ""))[0]))
                if kind and kind != "toc":  # the landmarks' toc entry points at the nav, kind "toc" already
                    kinds.setdefault(path, kind)
    return kinds


def _first(book, name: str) -> str | None:
    """The first Dublin Core `name` (title, creator, language) of the package, spaces tidied; None: none."""
    values = book.get_metadata("DC", name)
    text = " ".join(str(values[0][0] or "").split()) if values else ""
    return text or None


def _cover(book, ebooklib) -> tuple[bytes | None, str | None]:
    """The cover image: the EPUB 3 cover-image item, else the one EPUB 2's <meta name="cover"> names."""
    for item in book.get_items():
        if "cover-image" in (getattr(item, "properties", None) or ()) or item.get_type() == ebooklib.ITEM_COVER:
            if (item.media_type or "").startswith("image/"):
                return item.get_content(), item.media_type
    for value, attributes in book.get_metadata("OPF", "cover"):
        item = book.get_item_with_id((attributes or {}).get("content", ""))
        if item is not None and (item.media_type or "").startswith("image/"):
            return item.get_content(), item.media_type
    return None, None
