"""codes/serve/core/encode.py: every response format from several pushes is one file, the lossless ones the very samples."""

from __future__ import annotations

import io

import numpy as np
import pytest
import soundfile

from codes.serve.core.encode import StreamEncoder, pcm16

RATE = 24000


@pytest.fixture
def pieces() -> list[np.ndarray]:
    """Sentence-like pushes of odd lengths (not multiples of the FLAC block size), one past full scale."""
    rng = np.random.default_rng(0)
    pieces = [rng.uniform(-0.6, 0.6, n).astype(np.float32) for n in (RATE + 7, 9001, 13, 2 * RATE)]
    pieces[1][:5] = [1.5, -1.5, 1.0, -1.0, 0.0]  # clipping is pcm16's, in every lossless format
    return pieces


def encode(response_format: str, pieces: list[np.ndarray]) -> list[bytes]:
    encoder = StreamEncoder(response_format, RATE)
    return [encoder.push(wav) for wav in pieces] + [encoder.close()]


def reference(pieces: list[np.ndarray]) -> np.ndarray:
    return np.frombuffer(b"".join(encode("pcm", pieces)), dtype="<i2")


def test_pcm_is_pcm16_of_every_push(pieces):
    assert reference(pieces).tobytes() == b"".join(pcm16(wav, RATE) for wav in pieces)
    assert len(reference(pieces)) == sum(map(len, pieces))


@pytest.mark.parametrize("response_format", ["flac", "wav"])
def test_lossless_file_reads_back_with_its_length_and_the_very_samples(pieces, response_format):
    data = b"".join(encode(response_format, pieces))
    assert soundfile.info(io.BytesIO(data)).frames == len(reference(pieces))  # the header's count is right
    samples, rate = soundfile.read(io.BytesIO(data), dtype="int16")
    assert rate == RATE
    np.testing.assert_array_equal(samples, reference(pieces))


def test_flac_is_handed_out_whole_at_close(pieces):
    """STREAMINFO's total is known only at the end; a streamed one would say 0 ("unknown"), which
    libsndfile reads as an endless file."""
    chunks = encode("flac", pieces)
    assert all(chunk == b"" for chunk in chunks[:-1])
    data = chunks[-1]
    assert data[:4] == b"fLaC" and data[4] & 0x7F == 0  # STREAMINFO, the first metadata block
    total_samples = int.from_bytes(data[8 + 10:8 + 18], "big") & ((1 << 36) - 1)
    assert total_samples == sum(map(len, pieces))
    assert data[8 + 18:8 + 34] != bytes(16)  # the MD5 of the audio is filled in too


@pytest.mark.parametrize("response_format", ["mp3", "opus", "aac"])
def test_lossy_formats_stream_as_they_are_pushed(pieces, response_format):
    chunks = encode(response_format, pieces)
    assert any(chunks[:-1])  # bytes before close: the first audio goes out early
    import av

    with av.open(io.BytesIO(b"".join(chunks))) as container:
        seconds = sum(frame.samples / frame.sample_rate for frame in container.decode(audio=0))
    assert abs(seconds * RATE - sum(map(len, pieces))) < 0.1 * RATE  # priming and padding: a few frames
