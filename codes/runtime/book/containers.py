"""An audiobook's files as players expect them: AAC in MP4 (.m4b, .m4a) and MP3, each with chapter marks,
title, author and cover. PyAV (FFmpeg's libraries) encodes and writes the chapters; mutagen writes the tags
and the MP3's ID3 chapter frames (CHAP, CTOC). Nothing of either format is written by hand here.

A chapter mark is where the chapter's first speech starts, in samples of the track: MP4 chapters keep it
in the track's own time base (1/sample rate), ID3's CHAP in milliseconds (the frame's unit).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

CONTAINERS = {".m4b": "ipod", ".m4a": "ipod", ".mp4": "mp4", ".mp3": "mp3"}
BITRATES = {"ipod": 64_000, "mp4": 64_000, "mp3": 128_000}  # speech at 24 kHz, mono
ACX_MP3_BITRATE = 192_000  # ACX: MP3 at 192 kbps or more, constant bit rate


@dataclass(frozen=True)
class Mark:
    """A chapter: its title and the samples [start, end) of the track it covers."""

    title: str
    start: int
    end: int


@dataclass(frozen=True)
class Tags:
    title: str | None = None
    author: str | None = None
    cover: bytes | None = None
    cover_type: str | None = None  # "image/jpeg" or "image/png"
    track: tuple[int, int] | None = None  # (number, of) for a chapter's own file


def is_container(path) -> bool:
    return Path(path).suffix.lower() in CONTAINERS


def encode(path: Path, audio: np.ndarray, sample_rate: int, marks=(), bitrate: int | None = None,
           suffix: str | None = None) -> None:
    """The audio (float32 mono) into `path` as its extension (or `suffix`) says, with the chapter marks."""
    import av

    kind = CONTAINERS[(suffix or Path(path).suffix).lower()]
    pcm = np.clip(np.asarray(audio, dtype=np.float32), -1.0, 1.0)
    with av.open(str(path), "w", format=kind) as container:
        stream = container.add_stream("aac" if kind != "mp3" else "libmp3lame", rate=sample_rate, layout="mono")
        stream.bit_rate = bitrate or BITRATES[kind]
        if kind != "mp3" and marks:
            container.set_chapters([{"id": n + 1, "start": m.start, "end": m.end, "time_base": Fraction(1, sample_rate),
                                     "metadata": {"title": m.title}} for n, m in enumerate(marks)])
        step = 1 << 14
        for first in range(0, len(pcm), step):
            frame = av.AudioFrame.from_ndarray(pcm[None, first:first + step], format="flt", layout="mono")
            frame.sample_rate = sample_rate
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)


def tag(path: Path, tags: Tags, marks=(), sample_rate: int = 24000, suffix: str | None = None) -> None:
    """Title, author, cover (and an MP3's chapters) onto an encoded file."""
    if (suffix or Path(path).suffix).lower() == ".mp3":
        _tag_mp3(path, tags, marks, sample_rate)
    else:
        _tag_mp4(path, tags)


def _tag_mp4(path: Path, tags: Tags) -> None:
    from mutagen.mp4 import MP4, MP4Cover

    audio = MP4(str(path))
    if tags.title:
        audio["\xa9nam"] = [tags.title]
        audio["\xa9alb"] = [tags.title]
    if tags.author:
        audio["\xa9ART"] = [tags.author]
        audio["aART"] = [tags.author]
    if tags.track:
        audio["trkn"] = [tags.track]
    audio["\xa9gen"] = ["Audiobook"]
    if tags.cover and tags.cover_type in ("image/jpeg", "image/png"):
        kind = MP4Cover.FORMAT_PNG if tags.cover_type == "image/png" else MP4Cover.FORMAT_JPEG
        audio["covr"] = [MP4Cover(tags.cover, imageformat=kind)]
    audio.save()


def _tag_mp3(path: Path, tags: Tags, marks, sample_rate: int) -> None:
    from mutagen.id3 import APIC, CHAP, CTOC, ID3, TALB, TCON, TIT2, TPE1, TRCK, CTOCFlags

    id3 = ID3()
    if tags.title:
        id3.add(TIT2(encoding=3, text=[tags.title]))
        id3.add(TALB(encoding=3, text=[tags.title]))
    if tags.author:
        id3.add(TPE1(encoding=3, text=[tags.author]))
    if tags.track:
        id3.add(TRCK(encoding=3, text=[f"{tags.track[0]}/{tags.track[1]}"]))
    id3.add(TCON(encoding=3, text=["Audiobook"]))
    if tags.cover and tags.cover_type in ("image/jpeg", "image/png"):
        id3.add(APIC(encoding=3, mime=tags.cover_type, type=3, desc="Cover", data=tags.cover))
    if marks:
        ids = [f"chp{n}" for n in range(len(marks))]
        id3.add(CTOC(element_id="toc", flags=CTOCFlags.TOP_LEVEL | CTOCFlags.ORDERED, child_element_ids=ids,
                     sub_frames=[TIT2(encoding=3, text=["Chapters"])]))
        for element_id, mark in zip(ids, marks):
            id3.add(CHAP(element_id=element_id, start_time=round(mark.start * 1000 / sample_rate),
                         end_time=round(mark.end * 1000 / sample_rate), sub_frames=[TIT2(encoding=3, text=[mark.title])]))
    id3.save(str(path), v2_version=4)


def read_marks(path: Path) -> list[tuple[str, float]]:
    """The chapters as a player reads them from a file: (title, start in seconds), by mutagen (MP4's Nero
    chapter list, MP3's CHAP frames)."""
    import mutagen

    if Path(path).suffix.lower() == ".mp3":
        from mutagen.id3 import ID3

        frames = sorted(ID3(str(path)).getall("CHAP"), key=lambda f: f.start_time)
        return [(str(f.sub_frames["TIT2"]), f.start_time / 1000) for f in frames]
    return [(c.title, c.start) for c in (mutagen.File(str(path)).chapters or ())]
