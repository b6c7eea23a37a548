"""Hostile reference clips, for the upload tests and bench/soak.py: small files whose headers say, or hide,
that they unpack to far more audio than any limit allows."""

from __future__ import annotations

import io
import struct

import numpy as np
import soundfile

STREAMINFO_TOTAL = slice(18, 26)  # bytes of a FLAC file whose low 36 bits count its samples
TOTAL_MASK = (1 << 36) - 1


def silent_flac(seconds: float, rate: int = 192000, channels: int = 8) -> bytes:
    """Silence compresses to almost nothing: 300 s of 8 channels at 192 kHz is about 470 KB of FLAC and
    1.8 GB of float32. Written a second at a time, so the test never holds the whole of it either."""
    buffer = io.BytesIO()
    with soundfile.SoundFile(buffer, "w", rate, channels, format="FLAC", subtype="PCM_16") as clip:
        second = np.zeros((rate, channels), dtype=np.int16)
        for _ in range(int(seconds)):
            clip.write(second)
    return buffer.getvalue()


def with_flac_length(data: bytes, frames: int) -> bytes:
    """The FLAC with its STREAMINFO claiming `frames` samples (0: "unknown"), its audio unchanged."""
    patched = bytearray(data)
    assert patched[:4] == b"fLaC"
    field = int.from_bytes(patched[STREAMINFO_TOTAL], "big")
    patched[STREAMINFO_TOTAL] = ((field & ~TOTAL_MASK) | frames).to_bytes(8, "big")
    return bytes(patched)


def lying_matroska(flac: bytes, claimed_seconds: float) -> bytes:
    """The FLAC's packets in Matroska (which libsndfile does not read, so FFmpeg decodes it) with a
    Segment Duration of `claimed_seconds`."""
    import av

    buffer = io.BytesIO()
    with av.open(io.BytesIO(flac)) as source, av.open(buffer, "w", format="matroska") as target:
        stream = target.add_stream_from_template(source.streams.audio[0])
        for packet in source.demux(source.streams.audio[0]):
            if packet.dts is not None:
                packet.stream = stream
                target.mux(packet)
    data = bytearray(buffer.getvalue())
    at = data.find(b"\x44\x89")  # the Duration element, in milliseconds (Matroska's default timescale)
    assert at > 0 and data[at + 2] == 0x88, "no 8-byte Duration element"
    data[at + 3:at + 11] = struct.pack(">d", claimed_seconds * 1000)
    return bytes(data)
