"""Reading a book (codes.runtime.book): EPUB 2 and 3, Markdown, HTML and plain text give the same chapters,
titles, author and words; what is not read aloud (cover, title and copyright pages, the contents, page
numbers, footnotes) is left out unless asked for; chapter lines are found in several languages; quoted
dialogue goes to its own voice; and a damaged, DRM-locked or empty book is refused in one line."""

from __future__ import annotations

import io
import zipfile

import pytest

from codes.checks.sample_book import html, markdown, plain_text, sample_book, write_epub
from codes.common.errors import UserError
from codes.runtime.book import (DIALOGUE_SPEAKER, Reading, ReadingChoices, book_script, parse_book, parse_skip,
                                sentences_of)
from codes.runtime.book.plaintext import chapter_heading
from codes.runtime.script import Break

BOOK = sample_book(400, 3)
FORMATS = {"epub3": ("epub", lambda: write_epub(BOOK, 3)), "epub2": ("epub", lambda: write_epub(BOOK, 2)),
           "markdown": ("markdown", lambda: markdown(BOOK)), "html": ("html", lambda: html(BOOK)),
           "text": ("book", lambda: plain_text(BOOK))}


def _words(text: str) -> list[str]:
    return [w.strip("“”\"'.,!?:;").lower() for w in text.split() if w.strip("“”\"'.,!?:;")]


@pytest.mark.parametrize("name", FORMATS)
def test_every_format_gives_the_books_chapters_titles_and_words_and_nothing_else(name):
    kind, make = FORMATS[name]
    book = parse_book(make(), kind, source=f"book.{name}")
    assert book.title == BOOK.title and book.author == BOOK.author
    assert [c.kind for c in book.chapters] == ["chapter"] * 3
    titles = [c.title for c in book.chapters]
    if name == "text":  # a Gutenberg text prints "CHAPTER I" and the title in capitals
        assert titles == [f"Chapter {r}: {c.title.split(': ')[1]}" for r, c in zip(("I", "II", "III"), BOOK.chapters)]
    else:
        assert titles == [c.title for c in BOOK.chapters]
    for read, written in zip(book.chapters, BOOK.chapters):
        # no page number, footnote marker or note among the words: exactly the written paragraphs
        assert [_words(p) for p in read.paragraphs] == [_words(p) for p in written.paragraphs]


def test_an_epubs_metadata_cover_and_left_out_parts_are_read():
    book = parse_book(write_epub(BOOK), "epub", source="book.epub")
    assert book.language == "en" and book.cover.startswith(b"\x89PNG") and book.cover_type == "image/png"
    assert {entry.split(" ")[0] for entry in book.left_out} == {"cover", "titlepage", "copyright", "toc"}
    everything = parse_book(write_epub(BOOK), "epub", ReadingChoices(skip=parse_skip("none"), toc=True,
                                                                     page_numbers=True, footnotes=True))
    kinds = [c.kind for c in everything.chapters]
    assert kinds[:3] == ["titlepage", "copyright", "toc"] and kinds.count("chapter") == 3
    chapter = everything.chapters[kinds.index("chapter")]
    assert any("never hears" in p for p in chapter.paragraphs)  # the footnote, read when asked
    assert any(p.strip() == "11" for p in chapter.paragraphs)  # the printed page number, read when asked


def test_skip_names_parts_and_refuses_what_is_none():
    assert parse_skip("none") == frozenset()
    assert parse_skip("copyright, toc") == {"copyright", "toc"}
    with pytest.raises(UserError, match="--skip .*'chapters' is not one"):
        parse_skip("chapters")


@pytest.mark.parametrize("line, title", [
    ("Chapter 12", None), ("CHAPTER XII", None), ("Chapter Twelve: The Storm", "The Storm"), ("Part II", None),
    ("XII", None), ("12.", None), ("Prologue", None), ("Epilogue: After", "After"), ("Chapitre 3", None),
    ("3. Kapitel", None), ("Capítulo 3", None), ("Capitolo 7", None), ("Глава 3", None), ("第三章", None),
    ("Hoofdstuk 4", None)])
def test_chapter_lines_in_several_languages_are_found(line, title):
    assert chapter_heading(line, 1) == (line, title)


@pytest.mark.parametrize("line", ["I", "Mix", "CIVIL", "Part of me wanted to stay.", "Chapter one was boring.",
                                  "Chapter 3 began badly, and nobody cared about it at all, not even the cat, "
                                  "who slept."])
def test_text_that_only_looks_like_a_chapter_line_is_text(line):
    assert chapter_heading(line, 1) is None


def test_a_book_becomes_one_segment_a_sentence_with_pauses_at_paragraphs_and_chapters():
    book = parse_book(markdown(BOOK), "markdown", source="book.md")
    spoken = book_script(book, Reading(paragraph_gap=0.5, chapter_gap=1.5))
    segments = spoken.script.segments
    assert segments[0].text == BOOK.chapters[0].title  # the title first: where the chapter's mark goes
    assert len(spoken.chapter_starts) == 3 and spoken.chapter_starts[0] == 0
    for start, chapter in zip(spoken.chapter_starts, BOOK.chapters):
        assert segments[start].text == chapter.title
    breaks = [item.seconds for item in spoken.script.items if isinstance(item, Break)]
    paragraphs = sum(len(c.paragraphs) for c in BOOK.chapters)
    assert breaks.count(1.5) == 2 and breaks.count(0.5) == paragraphs  # each paragraph after its title
    assert " ".join(s.text for s in segments[1:spoken.chapter_starts[1]]) == " ".join(BOOK.chapters[0].paragraphs)
    untitled = book_script(book, Reading(titles=False))
    assert untitled.script.segments[0].text.startswith("The harbour")


def test_sentences_are_cut_at_sentence_ends_and_a_said_tag_stays_with_its_quote():
    assert sentences_of("Mr. Smith paid 5.3 dollars. “Ready?” he asked. Yes. OK") == [
        "Mr. Smith paid 5.3 dollars.", "“Ready?” he asked.", "Yes. OK"]


@pytest.mark.parametrize("language, paragraph, quoted", [
    ("en", "“Come here,” she said. “Now.”", ["“Come here,”", "“Now.”"]),
    ("de", "„Komm her“, sagte sie. »Jetzt.«", ["„Komm her“", "»Jetzt.«"]),
    ("fr", "« Viens ici », dit-elle.", ["« Viens ici »"]),
    ("ja", "「来て」と彼女は言った。", ["「来て」"])])
def test_quoted_dialogue_goes_to_the_dialogue_voice_in_the_languages_marks(language, paragraph, quoted):
    from codes.runtime.book import Book, Chapter

    book = Book("T", (Chapter("", (paragraph,)),), language=language)
    segments = book_script(book, Reading(titles=False, dialogue_speaker=DIALOGUE_SPEAKER)).script.segments
    assert [s.text for s in segments if s.speaker == DIALOGUE_SPEAKER] == quoted
    assert all(s.speaker is None for s in segments if s.text not in quoted)


def _zip(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


def _files(epub: bytes) -> dict[str, bytes]:
    archive = zipfile.ZipFile(io.BytesIO(epub))
    return {name: archive.read(name) for name in archive.namelist()}


ENCRYPTION = ('<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
              'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
              '<enc:EncryptionMethod Algorithm="{algorithm}"/>'
              '<enc:CipherData><enc:CipherReference URI="EPUB/chapter01.xhtml"/></enc:CipherData>'
              "</enc:EncryptedData></encryption>")


def test_a_drm_locked_epub_is_refused_in_one_line_and_font_obfuscation_is_not_drm():
    files = _files(write_epub(BOOK))
    locked = ENCRYPTION.format(algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc")
    with pytest.raises(UserError, match=r"locked with DRM \(EPUB/chapter01.xhtml\).*DRM-free") as refused:
        parse_book(_zip({**files, "META-INF/encryption.xml": locked}), "epub", source="locked.epub")
    assert "\n" not in str(refused.value)
    with pytest.raises(UserError, match=r"locked with DRM \(META-INF/rights.xml\)"):
        parse_book(_zip({**files, "META-INF/rights.xml": b"<rights/>"}), "epub", source="adept.epub")
    fonts = ENCRYPTION.format(algorithm="http://www.idpf.org/2008/embedding")
    assert len(parse_book(_zip({**files, "META-INF/encryption.xml": fonts}), "epub").chapters) == 3


def test_a_cut_or_damaged_epub_is_refused_in_one_line():
    epub = write_epub(BOOK)
    with pytest.raises(UserError, match="cut.epub is not a readable EPUB"):
        parse_book(epub[: len(epub) // 2], "epub", source="cut.epub")
    files = _files(epub)
    stored = io.BytesIO()
    with zipfile.ZipFile(stored, "w") as archive:  # stored, so a flipped byte lands in a chapter's text
        for name, data in files.items():
            archive.writestr(name, data, compress_type=zipfile.ZIP_STORED)
    damaged = bytearray(stored.getvalue())
    damaged[damaged.find(b"The harbour was quiet")] ^= 0x20
    with pytest.raises(UserError, match=r"damaged.epub is damaged \(.*chapter01.xhtml fails its checksum\)"):
        parse_book(bytes(damaged), "epub", source="damaged.epub")
    with pytest.raises(UserError, match="is a zip but not an EPUB"):
        parse_book(_zip({"a.txt": b"x"}), "epub", source="other.epub")


def test_an_empty_book_is_refused_in_one_line():
    with pytest.raises(UserError, match="empty.txt is empty"):
        parse_book(b"  \n", "book", source="empty.txt")
    files = _files(write_epub(BOOK))
    blank = b'<html xmlns="http://www.w3.org/1999/xhtml"><head><title>x</title></head><body></body></html>'
    hollow = {name: blank if name.endswith(("01.xhtml", "02.xhtml", "03.xhtml")) else data for name, data in files.items()}
    with pytest.raises(UserError, match="hollow.epub has no text to read once .* are left out; see --skip"):
        parse_book(_zip(hollow), "epub", source="hollow.epub")


def test_html_as_publishers_write_it_gutenberg_page_numbers_bare_note_links_and_line_breaks():
    page = ('<html lang="en"><head><title>T</title></head><body><h2>One</h2>'
            '<p>A line<br/>of verse<sup><a href="#fn3">3</a></sup> here.<span class="pagenum">[Pg 12]</span></p>'
            '<div class="footnotes"><p>3. The note.</p></div><h2>Two</h2><p>More text.</p></body></html>')
    book = parse_book(page, "html", source="page.html")
    assert [(c.title, c.paragraphs) for c in book.chapters] == [("One", ("A line of verse here.",)),
                                                                ("Two", ("More text.",))]
    kept = parse_book(page, "html", ReadingChoices(page_numbers=True, footnotes=True))
    assert kept.chapters[0].paragraphs == ("A line of verse3 here.[Pg 12]", "3. The note.")


def test_words_of_no_length_join_a_neighbour_in_the_read_along():
    from codes.runtime.book.read_along import timed_words

    words = [{"word": " Oh", "start": 100, "end": 100}, {"word": " the", "start": 100, "end": 2500},
             {"word": " sea", "start": 2500, "end": 2510}, {"word": " is", "start": 2510, "end": 4800}]
    assert timed_words(words, 24000) == [("Oh the sea", 100, 2500), ("is", 2510, 4800)]
    assert timed_words(words[:1], 24000) == []  # nothing to time: the sentence is one clip
