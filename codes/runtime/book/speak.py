"""speak_book: a book read aloud in one call (the Python API, and inference.py --script book.epub)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from codes.common.errors import UserError
from codes.runtime.book.reading import DIALOGUE_SPEAKER, BookScript, Reading, book_script
from codes.runtime.script import speak_script

NARRATOR = "Narrator"


def book_speakers(speakers: Mapping | None, dialogue_voice=None) -> dict:
    """The speakers a book is read by: those given (the first is the narrator; none: an auto narrator, made
    once from the book's first sentence), and the dialogue voice as DIALOGUE_SPEAKER where one is given."""
    chosen = dict(speakers or {}) or {NARRATOR: "auto"}
    if dialogue_voice is not None:
        if DIALOGUE_SPEAKER in chosen:
            raise UserError(f"--dialogue_voice is speaker {DIALOGUE_SPEAKER!r}; do not declare it with --speaker too")
        chosen[DIALOGUE_SPEAKER] = dialogue_voice
    return chosen


def speak_book(tts, book, speakers: Mapping | None = None, *, reading: Reading | None = None, dialogue_voice=None,
               **script_options):
    """A Book (codes/runtime/book/reading.py: read_book, parse_book) read aloud: returns (BookScript,
    RenderedScript). speakers: {name: VOICE}, the first the narrator; dialogue_voice: the voice of what is in
    quotation marks. script_options: as speak_script takes them (seed, settings, ledger, ray, caption_words,
    on_progress, ...); the segments go in reading order, so progress follows the chapters."""
    if isinstance(book, BookScript):
        spoken = book
    else:
        reading = reading or Reading()
        if dialogue_voice is not None:
            reading = replace(reading, dialogue_speaker=DIALOGUE_SPEAKER)
        spoken = book_script(book, reading)
    script_options.setdefault("order", "timeline")
    rendered = speak_script(tts, spoken.script, book_speakers(speakers, dialogue_voice), **script_options)
    return spoken, rendered


