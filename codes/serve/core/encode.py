"""Response formats: float 24 kHz audio in, bytes out, one sentence at a time.

wav and pcm are written by soundfile, so their 16-bit samples are exactly what inference.py writes;
mp3, opus (in Ogg), aac (ADTS) and flac go through PyAV's encoders (FFmpeg's libraries, no
subprocess). mp3, opus and aac stream: each push returns the bytes the muxer has finished so far.
FLAC is a file: its header (STREAMINFO, the first bytes) holds the total sample count, which only the
end knows, and libsndfile (soundfile) cannot read one that says "unknown". So a FLAC is encoded as
the audio comes but handed out whole at close(), after the muxer has rewritten its header.
"""

from __future__ import annotations

import io
import struct

import numpy as np

from codes.common.errors import UserError

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
CONTENT_TYPES = {"mp3": "audio/mpeg", "opus": "audio/ogg", "aac": "audio/aac", "flac": "audio/flac",
                 "wav": "audio/wav", "pcm": "audio/pcm"}
# format -> (PyAV container, codec)
_CONTAINERS = {"mp3": ("mp3", "libmp3lame"), "opus": ("ogg", "libopus"), "aac": ("adts", "aac"), "flac": ("flac", "flac")}
_UNKNOWN_SIZE = 0xFFFFFFFF  # a streamed WAV's sizes: "until the end of the stream", as streaming servers write it


def check_format(response_format: str) -> str:
    if response_format not in FORMATS:
        raise UserError(f"response_format {response_format!r} is not supported; use one of {', '.join(FORMATS)}")
    return response_format


def pcm16(wav: np.ndarray, sample_rate: int) -> bytes:
    """Raw 16-bit little-endian samples, converted as soundfile converts them for inference.py's WAV."""
    import soundfile

    buffer = io.BytesIO()
    soundfile.write(buffer, np.asarray(wav, dtype=np.float32), sample_rate, format="RAW", subtype="PCM_16",
                    endian="LITTLE")
    return buffer.getvalue()


def wav_header(sample_rate: int, data_bytes: int = _UNKNOWN_SIZE) -> bytes:
    """A 16-bit mono PCM WAV header; the default sizes say "read to the end" for a stream."""
    riff_size = _UNKNOWN_SIZE if data_bytes == _UNKNOWN_SIZE else 36 + data_bytes
    return (b"RIFF" + struct.pack("<I", riff_size) + b"WAVE"
            + b"fmt " + struct.pack("<IHHIIHH", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16)
            + b"data" + struct.pack("<I", data_bytes))


class _Sink(io.RawIOBase):
    """A write-only, unseekable file for PyAV's muxer: whatever it wrote since the last take()."""

    def __init__(self):
        super().__init__()
        self._buffer = bytearray()

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return False

    def write(self, data) -> int:
        self._buffer += bytes(data)
        return len(data)

    def take(self) -> bytes:
        out = bytes(self._buffer)
        self._buffer.clear()
        return out


class StreamEncoder:
    """push(audio) -> bytes ready now; close() -> the rest. The concatenation is one valid file
    (a FLAC's bytes all come from close())."""

    def __init__(self, response_format: str, sample_rate: int):
        self.format, self.sample_rate = check_format(response_format), sample_rate
        self._started = False
        self._container = self._stream = self._sink = None
        if self.format in _CONTAINERS:
            import av

            container_format, codec = _CONTAINERS[self.format]
            # A seekable sink lets the FLAC muxer go back and write the final STREAMINFO.
            self._sink = io.BytesIO() if self.format == "flac" else _Sink()
            # Ogg holds packets until a page fills (about a second); small pages let opus stream.
            options = {"page_duration": "20000"} if container_format == "ogg" else {}
            self._container = av.open(self._sink, mode="w", format=container_format, options=options)
            self._stream = self._container.add_stream(codec, rate=sample_rate, layout="mono")
            self._pts = 0

    def push(self, wav: np.ndarray) -> bytes:
        wav = np.asarray(wav, dtype=np.float32)
        if self.format == "pcm":
            return pcm16(wav, self.sample_rate)
        if self.format == "wav":
            head = b"" if self._started else wav_header(self.sample_rate)
            self._started = True
            return head + pcm16(wav, self.sample_rate)
        if len(wav) == 0:
            return b""
        import av

        if self.format == "flac":  # lossless: the very 16-bit samples wav and pcm carry
            samples = np.frombuffer(pcm16(wav, self.sample_rate), dtype="<i2")[None, :]
            frame = av.AudioFrame.from_ndarray(samples, format="s16", layout="mono")
        else:
            frame = av.AudioFrame.from_ndarray(np.clip(wav, -1.0, 1.0)[None, :], format="fltp", layout="mono")
        frame.sample_rate, frame.pts = self.sample_rate, self._pts
        self._pts += len(wav)
        for packet in self._stream.encode(frame):
            self._container.mux(packet)
        return b"" if self.format == "flac" else self._sink.take()

    def close(self) -> bytes:
        if self._container is None:
            return b"" if self._started or self.format == "pcm" else wav_header(self.sample_rate, 0)
        for packet in self._stream.encode(None):
            self._container.mux(packet)
        self._container.close()
        self._container = None
        return self._sink.getvalue() if self.format == "flac" else self._sink.take()

    def abort(self) -> None:
        if self._container is not None:
            try:
                self._container.close()
            except Exception:  # a half-written stream nobody will read; closing is best effort
                pass
            self._container = None


def encode_whole(wav: np.ndarray, response_format: str, sample_rate: int) -> bytes:
    """One whole file of `wav` in `response_format` (what a streamed answer's bytes join into)."""
    encoder = StreamEncoder(response_format, sample_rate)
    return encoder.push(wav) + encoder.close()
