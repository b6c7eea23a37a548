"""A spoken book's files: the book (a container with chapter marks, or any audio file), one file a chapter,
captions, a read-along EPUB, and a loudness report; each checked before any work and written whole.

Where a chapter is (chapter_spans): its part of the track runs from its first piece's first sample (the
pause before it belongs to the chapter before) to the next chapter's; its mark is where its first speech
starts (its first segment's caption start, the sample after the piece's leading pad). Without --loudness
or --acx the samples are the script's own, so each chapter equals its segments spoken alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.common.fileio import atomic_path
from codes.runtime.audio.outputs import check_audio_output_path, check_output_path, write_audio
import codes.runtime.book.containers as containers
import codes.runtime.book.loudness as loudness
from codes.runtime.book.reading import BookScript
from codes.runtime.script import CAPTION_SUFFIXES, write_captions

CHAPTER_SUFFIXES = (".mp3", ".m4a", ".wav", ".flac", ".ogg")


@dataclass(frozen=True)
class ChapterSpan:
    number: int  # from 1
    title: str
    first: int  # the track's sample its part begins at
    end: int  # the sample after its part
    mark: int  # where its first speech starts
    segments: range  # its segments


@dataclass(frozen=True)
class BookFiles:
    """What a spoken book is written to (inference.py's flags). chapters: a folder, one file a chapter, in
    chapter_format (default: the output's kind). loudness: a target LUFS per chapter, under true_peak dBTP."""

    output: Path
    chapters: Path | None = None
    chapter_format: str | None = None
    captions: Path | None = None
    read_along: Path | None = None
    loudness: float | None = None
    true_peak: float = -1.0
    acx: bool = False
    float_wav: bool = False

    def chapter_suffix(self) -> str:
        if self.chapter_format:
            return f".{self.chapter_format.lstrip('.').lower()}"
        if self.acx:
            return ".mp3"  # what ACX takes
        suffix = self.output.suffix.lower()
        return ".m4a" if suffix in (".m4b", ".mp4") else suffix


def check_book_files(files: BookFiles, book_path: Path | None = None, labels=None) -> None:
    """Fail before any compute where a file cannot be written or two would be one."""
    labels = labels or {"output": "--output", "chapters": "--chapters", "captions": "--captions",
                        "read_along": "--read_along"}
    if containers.is_container(files.output):
        check_output_path(files.output, labels["output"])
    else:
        check_audio_output_path(files.output, labels["output"])
    named = [(labels["output"], files.output)]
    if files.captions is not None:
        check_output_path(files.captions, labels["captions"])
        if files.captions.suffix.lower() not in CAPTION_SUFFIXES:
            raise UserError(f"{labels['captions']} {files.captions} needs .srt or .vtt")
        named.append((labels["captions"], files.captions))
    if files.read_along is not None:
        check_output_path(files.read_along, labels["read_along"])
        if files.read_along.suffix.lower() != ".epub":
            raise UserError(f"{labels['read_along']} {files.read_along} needs .epub (an EPUB 3 with media overlays)")
        named.append((labels["read_along"], files.read_along))
    if files.chapters is not None:
        if files.chapters.exists() and not files.chapters.is_dir():
            raise UserError(f"{labels['chapters']} {files.chapters} is a file; give a folder (made if missing)")
        check_output_path(files.chapters / "chapter" if files.chapters.is_dir() else files.chapters, labels["chapters"])
        if files.chapter_suffix() not in CHAPTER_SUFFIXES:
            raise UserError(f"--chapter_format must be one of {', '.join(s[1:] for s in CHAPTER_SUFFIXES)}, "
                            f"got {files.chapter_suffix()[1:]!r}")
    if files.loudness is not None and not -40.0 <= files.loudness <= -5.0:
        raise UserError(f"--loudness is a target in LUFS between -40 and -5 (audiobooks: -18 to -20), got {files.loudness:g}")
    if not -20.0 <= files.true_peak <= 0.0:
        raise UserError(f"--true_peak is a ceiling in dBTP between -20 and 0, got {files.true_peak:g}")
    if files.loudness is not None and files.acx:
        raise UserError("--loudness and --acx each level the chapters; give one of them")
    resolved = {}
    for label, path in named:
        if book_path is not None and path.resolve() == Path(book_path).resolve():
            raise UserError(f"{label} {path} is the book itself; write it to another file")
        if path.resolve() in resolved:
            raise UserError(f"{label} {path} is {resolved[path.resolve()]} too; give each its own file")
        resolved[path.resolve()] = label


def chapter_spans(book_script: BookScript, rendered) -> list[ChapterSpan]:
    starts = list(book_script.chapter_starts) + [len(rendered.captions)]
    spans = []
    for number, chapter in enumerate(book_script.book.chapters):
        first, last = starts[number], starts[number + 1]
        end = rendered.offsets[last] if last < len(rendered.offsets) else len(rendered.audio)
        spans.append(ChapterSpan(number + 1, chapter.title or f"Chapter {number + 1}", rendered.offsets[first], end,
                                 rendered.captions[first].start, range(first, last)))
    return spans


def chapter_file_name(span: ChapterSpan, suffix: str) -> str:
    """"01 - The Harbour.mp3": number and title, as ACX names its files; the title made a safe file name."""
    title = re.sub(r"[^\w .,'()&-]+", " ", span.title, flags=re.U)
    title = " ".join(title.split())[:80].strip(" .") or "Chapter"
    return f"{span.number:02d} - {title}{suffix}"


@dataclass
class SpokenBook:
    """The book's audio levelled chapter by chapter, and each chapter's own audio as its file holds it."""

    audio: np.ndarray
    sample_rate: int
    spans: list[ChapterSpan]
    gains: list[float]
    chapter_audio: list[np.ndarray]
    chapter_shift: list[int]  # a chapter file's sample 0 on the track is span.first - shift (room tone added)


def level(book_script: BookScript, rendered, files: BookFiles) -> SpokenBook:
    rate = rendered.sample_rate
    spans = chapter_spans(book_script, rendered)
    levelling = files.acx or files.loudness is not None
    audio = rendered.audio.copy() if levelling else rendered.audio  # the track is changed in place only then
    gains, chapter_audio, shifts = [], [], []
    for span in spans:
        part = audio[span.first:span.end]
        if files.acx:
            gain = loudness.level_for_acx(part, rate)
        elif files.loudness is not None:
            gain = loudness.level_to_loudness(part, rate, files.loudness, files.true_peak)
        else:
            gain = 0.0
        if gain:
            audio[span.first:span.end] = loudness.apply_gain(part, gain)
        part = audio[span.first:span.end]
        part, shift = loudness.with_room_tone(part, rate) if files.acx else (part, 0)
        gains.append(gain)
        chapter_audio.append(part)
        shifts.append(shift)
    return SpokenBook(audio, rate, spans, gains, chapter_audio, shifts)


def write_book(book_script: BookScript, rendered, files: BookFiles, part_folder: Path | None = None) -> tuple[list[Path], str]:
    """Every file asked for, each written whole; returns what was written and the loudness report."""
    spoken = level(book_script, rendered, files)
    book = book_script.book
    tags = containers.Tags(book.title, book.author, book.cover, book.cover_type)
    marks = [containers.Mark(s.title, s.mark, s.end) for s in spoken.spans]
    written = [files.output]
    _write_audio(files.output, spoken.audio, spoken.sample_rate, tags, marks, files.float_wav, part_folder)
    if files.captions is not None:
        write_captions(files.captions, rendered.captions, spoken.sample_rate)
        written.append(files.captions)
    if files.chapters is not None:
        files.chapters.mkdir(exist_ok=True)
        suffix = files.chapter_suffix()
        for span, audio, shift in zip(spoken.spans, spoken.chapter_audio, spoken.chapter_shift):
            path = files.chapters / chapter_file_name(span, suffix)
            chapter_tags = replace(tags, track=(span.number, len(spoken.spans)))
            _write_audio(path, audio, spoken.sample_rate, chapter_tags, (), files.float_wav, acx=files.acx)
            written.append(path)
            if files.captions is not None:
                captions = chapter_captions(rendered.captions, span, shift)
                caption_path = path.with_suffix(files.captions.suffix.lower())
                write_captions(caption_path, captions, spoken.sample_rate)
                written.append(caption_path)
    rows = [(f"{span.number:02d} {span.title}", loudness.measure(audio, spoken.sample_rate), gain)
            for span, audio, gain in zip(spoken.spans, spoken.chapter_audio, spoken.gains)]
    if files.read_along is not None:
        from codes.runtime.book.read_along import write_read_along

        write_read_along(files.read_along, book_script, rendered, spoken)
        written.append(files.read_along)
    return written, loudness.report_table(rows, files.acx)


def chapter_captions(captions, span: ChapterSpan, shift: int = 0):
    """A chapter's captions on its own file's samples (its part's first sample is 0, moved by `shift`)."""
    move = shift - span.first

    def moved(caption):
        words = None if caption.words is None else tuple(
            {**w, "start": w["start"] + move, "end": w["end"] + move} for w in caption.words)
        return replace(caption, start=caption.start + move, end=caption.end + move, words=words)

    return [moved(captions[i]) for i in span.segments]


def _write_audio(path: Path, audio: np.ndarray, rate: int, tags, marks, float_wav: bool, part_folder=None,
                 acx: bool = False) -> None:
    if not containers.is_container(path):
        write_audio(path, audio, rate, float_wav, part_folder)
        return
    bitrate = None
    if acx and path.suffix.lower() == ".mp3":  # ACX: 44.1 kHz, 192 kbps constant
        import soxr

        audio, rate = soxr.resample(audio, rate, 44100).astype(np.float32), 44100
        bitrate = containers.ACX_MP3_BITRATE
    with atomic_path(path, folder=part_folder) as tmp:
        containers.encode(tmp, audio, rate, marks, bitrate, suffix=path.suffix)
        containers.tag(tmp, tags, marks, rate, suffix=path.suffix)
