"""A read-along book: an EPUB 3 whose Media Overlays (SMIL) time every sentence, and with word captions
every word, to the audio the chapter was spoken into, so a reading system highlights the text as it is
heard (EPUB 3 Media Overlays 3.3).

Each chapter is one XHTML document (its title, then its paragraphs; every sentence a span with an id, every
word too where words were aligned), one AAC file (audio/mp4, an EPUB 3 core media type; FFmpeg encodes AAC in
half MP3's time) of the chapter's part of the track, and one SMIL document: a
<par> a sentence (or, with words, a <seq> a sentence holding a <par> a word) whose clipBegin and clipEnd
are its caption's samples on the chapter's audio. The package gives each overlay's duration and the whole's
(media:duration) and the class a reading system sets on what is being read (media:active-class). ebooklib
writes the package; nothing of EPUB is assembled by hand but the overlay documents' text.
"""

from __future__ import annotations

import hashlib
import html
from pathlib import Path

from codes.common.fileio import atomic_path
import codes.runtime.book.containers as containers

ACTIVE_CLASS = "-epub-media-overlay-active"
CSS = f".{ACTIVE_CLASS} {{ background-color: #ffe58a; }}\nbody {{ font-family: serif; line-height: 1.5; }}\n"


def clock(seconds: float) -> str:
    """SMIL's full clock value, to the millisecond: 0:01:02.345."""
    millis = round(seconds * 1000)
    return f"{millis // 3_600_000}:{millis // 60_000 % 60:02d}:{millis // 1000 % 60:02d}.{millis % 1000:03d}"


def _clip(start: int, end: int, origin: int, rate: int) -> str:
    return f'clipBegin="{(start - origin) / rate:.3f}s" clipEnd="{(end - origin) / rate:.3f}s"'


def timed_words(words, rate: int) -> list[tuple[str, int, int]]:
    """A sentence's aligned words as (text, start, end) clips that still end after they begin once written in
    milliseconds, as SMIL requires: a word shorter than 2 ms (DTW's vertical steps give words of no length)
    joins the word before it, or the one after where it comes first, as word captions join it to the cue before."""
    groups: list[list] = []
    pending = ""  # words of no length before any word with one
    for word in words:
        text = word["word"].strip()
        if word["end"] - word["start"] >= 2 * rate // 1000:  # 2 ms: still apart once each is rounded to one
            groups.append([f"{pending} {text}".strip(), word["start"], word["end"]])
            pending = ""
        elif groups:
            groups[-1][0] = f"{groups[-1][0]} {text}"
        else:
            pending = f"{pending} {text}".strip()
    if groups and pending:
        groups[0][0] = f"{pending} {groups[0][0]}"
    return [tuple(group) for group in groups]


def chapter_documents(book_script, rendered, span, number: int, audio_name: str):
    """(the chapter's XHTML body, its SMIL) for one chapter: ids c{n}s{k} for sentences, c{n}s{k}w{j} for words."""
    rate = rendered.sample_rate
    page = f"chapter{number:03d}.xhtml"
    blocks: dict[int, list[str]] = {}
    pars: list[str] = []
    for index in span.segments:
        caption = rendered.captions[index]
        spot = book_script.spots[index]
        sid = f"c{number}s{index - span.segments.start}"
        groups = timed_words(caption.words or (), rate)
        if groups:
            inner = " ".join(f'<span id="{sid}w{j}">{html.escape(text)}</span>' for j, (text, _, _) in enumerate(groups))
            timed = "".join(f'<par id="p{sid}w{j}"><text src="{page}#{sid}w{j}"/><audio src="{audio_name}" '
                            f'{_clip(start, end, span.first, rate)}/></par>' for j, (_, start, end) in enumerate(groups))
            pars.append(f'<seq id="q{sid}" epub:textref="{page}#{sid}">{timed}</seq>')
        else:
            inner = html.escape(caption.text)
            pars.append(f'<par id="p{sid}"><text src="{page}#{sid}"/><audio src="{audio_name}" '
                        f'{_clip(caption.start, max(caption.end, caption.start + 2 * rate // 1000), span.first, rate)}'
                        '/></par>')  # a piece post-processing left no speech in still ends after it begins
        blocks.setdefault(spot.paragraph, []).append(f'<span id="{sid}">{inner}</span>')
    body = []
    for paragraph, spans in blocks.items():
        tag = "h1" if paragraph == -1 else "p"
        body.append(f"<{tag}>{' '.join(spans)}</{tag}>")
    if -1 not in blocks:
        body.insert(0, f"<h1>{html.escape(span.title)}</h1>")
    body = [f'<section id="c{number}">', *body, "</section>"]
    smil = ('<?xml version="1.0" encoding="UTF-8"?>\n<smil xmlns="http://www.w3.org/ns/SMIL" '
            'xmlns:epub="http://www.idpf.org/2007/ops" version="3.0"><body>'
            f'<seq id="seq{number}" epub:textref="{page}#c{number}" epub:type="bodymatter chapter">{"".join(pars)}</seq>'
            "</body></smil>\n")
    return page, "".join(body), smil


def write_read_along(path: Path, book_script, rendered, spoken) -> None:
    """The read-along EPUB at `path`, written whole. spoken: the levelled book (audiobook.SpokenBook)."""
    from ebooklib import epub

    book = book_script.book
    out = epub.EpubBook()
    out.set_identifier("omnivoice-read-along-" + hashlib.sha256(f"{book.title}\0{book.author}".encode()).hexdigest()[:16])
    out.set_title(book.title)
    out.set_language((book.language or "en").split("_")[0])
    if book.author:
        out.add_author(book.author)
    if book.cover and book.cover_type in ("image/jpeg", "image/png"):
        out.set_cover("cover" + (".png" if book.cover_type == "image/png" else ".jpg"), book.cover, create_page=False)
    style = epub.EpubItem(uid="style", file_name="style.css", media_type="text/css", content=CSS.encode())
    out.add_item(style)
    pages, total = [], 0.0
    for span in spoken.spans:
        number = span.number
        audio_name = f"audio/chapter{number:03d}.m4a"
        page_name, body, smil = chapter_documents(book_script, rendered, span, number, audio_name)
        part = spoken.audio[span.first:span.end]
        buffer = _aac(part, spoken.sample_rate)
        out.add_item(epub.EpubItem(uid=f"audio{number}", file_name=audio_name, media_type="audio/mp4", content=buffer))
        overlay = epub.EpubSMIL(uid=f"smil{number}", file_name=f"chapter{number:03d}.smil", content=smil.encode())
        out.add_item(overlay)
        page = epub.EpubHtml(title=span.title, file_name=page_name, lang=out.language, media_overlay=f"smil{number}")
        page.content = body
        page.add_item(style)
        out.add_item(page)
        pages.append(page)
        seconds = len(part) / spoken.sample_rate
        total += seconds
        out.add_metadata(None, "meta", clock(seconds), {"property": "media:duration", "refines": f"#smil{number}"})
    out.add_metadata(None, "meta", clock(total), {"property": "media:duration"})
    out.add_metadata(None, "meta", ACTIVE_CLASS, {"property": "media:active-class"})
    out.toc = tuple(epub.Link(p.file_name, p.title, f"toc{n}") for n, p in enumerate(pages))
    out.add_item(epub.EpubNcx())
    out.add_item(epub.EpubNav())
    out.spine = ["nav", *pages]
    with atomic_path(path) as tmp:
        epub.write_epub(str(tmp), out, {"epub3_pages": False})


def _aac(audio, sample_rate: int) -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="omnivoice-read-along-") as folder:
        path = Path(folder) / "chapter.m4a"
        containers.encode(path, audio, sample_rate)
        return path.read_bytes()
