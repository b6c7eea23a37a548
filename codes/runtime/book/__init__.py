"""Books: an EPUB, Markdown, HTML or plain-text book read aloud into a chaptered audiobook (docs/books.md).

The package's front door: drivers outside it (inference.py, the server) import from here. A stage a module:

    read      read_book(path, format, ReadingChoices) / parse_book(bytes, format, ...) -> Book (model.py):
              epub.py (ebooklib), markup.py (HTML, and Markdown through markdown-it-py), plaintext.py
    script    book_script(book, Reading(gaps, titles, dialogue speaker)) -> BookScript: one segment a sentence,
              the chapters' first segments (reading.py); it is spoken as any script (codes.runtime.script)
    speak     speak_book(tts, book, speakers, ...) -> (BookScript, RenderedScript) (speak.py)
    write     check_book_files / write_book(book_script, rendered, BookFiles) (audiobook.py): the book with
              chapter marks (containers.py: MP4/M4B and MP3 by PyAV and mutagen), a file a chapter, captions,
              the read-along EPUB 3 (read_along.py) and the loudness report (loudness.py)
"""

from codes.runtime.book.audiobook import (BookFiles, ChapterSpan, chapter_file_name, chapter_spans, check_book_files,
                                          write_book)
from codes.runtime.book.containers import Mark, Tags, is_container, read_marks
from codes.runtime.book.loudness import Measure, measure
from codes.runtime.book.model import DEFAULT_SKIP, KINDS, Book, Chapter, ReadingChoices, parse_skip
from codes.runtime.book.reading import (BOOK_FORMATS, DIALOGUE_SPEAKER, BookScript, Reading, book_format, book_script,
                                        parse_book, read_book, sentences_of)
from codes.runtime.book.speak import NARRATOR, book_speakers, speak_book

__all__ = ["BOOK_FORMATS", "Book", "BookFiles", "BookScript", "Chapter", "ChapterSpan", "DEFAULT_SKIP",
           "DIALOGUE_SPEAKER", "KINDS", "Mark", "Measure", "NARRATOR", "Reading", "ReadingChoices", "Tags",
           "book_format", "book_script", "book_speakers", "chapter_file_name", "chapter_spans", "check_book_files",
           "is_container", "measure", "parse_book", "parse_skip", "read_book", "read_marks", "sentences_of",
           "speak_book", "write_book"]
