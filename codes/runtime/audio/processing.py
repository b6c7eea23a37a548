"""Audio in numpy: reading, resampling, reference preparation and output post-processing.

Waveforms are mono float32 1-D arrays. Upstream does its silence handling with
pydub on 16-bit PCM; the functions here reproduce pydub's arithmetic exactly
(int16 truncation, integer RMS, millisecond slicing that rounds lengths and
zero-pads up to a millisecond) so the samples that come out are the same,
without pydub or ffmpeg. Resampling reproduces torchaudio's default
band-limited sinc (Hann window, 6 zero crossings, roll-off 0.99), which
upstream uses on reference audio.
"""

from __future__ import annotations

import io
import logging
import math
import os

import numpy as np

from codes.common.errors import UserError
from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.contract.specs import HOP_LENGTH, SAMPLE_RATE

logger = logging.getLogger(__name__)

REF_RMS_FLOOR = 0.1  # quieter references are raised to this RMS, and the output lowered to match
PEAK_WITHOUT_REFERENCE = 0.5
LONG_REFERENCE_S = 20.0
SILENCE_DBFS = -50.0  # upstream's silence threshold for removal and edge trimming
SEEK_STEP_MS = 10
CROSS_FADE_GAP_S = 0.3
MAX_CLIP_RATE = 384_000  # Hz: the highest rate studio files use; a header that claims more is refused
BLOCK_SAMPLES = 1 << 20  # samples (all channels together) decoded at once: 4 MiB of float32 at most
UNKNOWN_FRAMES = 2**63 - 1  # libsndfile's SF_COUNT_MAX: a length its header does not give


# ---------------------------------------------------------------------------
# Reading and resampling
# ---------------------------------------------------------------------------


def read_audio(path: str | os.PathLike) -> tuple[np.ndarray, int]:
    """(waveform [channels, samples] float32, sample_rate) from any file soundfile can read."""
    import soundfile

    if not os.path.isfile(path):
        raise UserError(f"audio file not found: {path}")
    try:
        data, sample_rate = soundfile.read(path, dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile raises several types for unreadable files
        raise UserError(f"cannot read audio file {path}: {exc}; use WAV, FLAC, OGG or MP3") from exc
    return np.ascontiguousarray(data.T), int(sample_rate)


class ClipTooLong(UserError):
    """A clip longer than its reader was allowed: `seconds` as its header says, or None where decoding
    went past the limit (a header that lies, or gives no length)."""

    def __init__(self, seconds: float | None, limit: float):
        self.seconds, self.limit = seconds, limit
        super().__init__(f"the clip is {self.length}; the limit is {limit:g} s: trim it")

    @property
    def length(self) -> str:
        """The clip's length as far as it is known: "12.3 s", or "over 30 s"."""
        return f"{self.seconds:.1f} s" if self.seconds is not None else f"over {self.limit:g} s"


def read_clip(data: bytes, max_seconds: float) -> tuple[np.ndarray, int]:
    """A clip's bytes in any format libsndfile or FFmpeg reads -> (mono float32 waveform, rate).

    Bounded whatever the bytes claim: the header's length is checked before any decoding, the decoded
    samples are counted and reading stops once they pass `max_seconds` (a header can lie), and channels
    are mixed down block by block, so no more than a block of the multi-channel clip ever exists.
    ClipTooLong past the limit; UserError for a clip neither library reads (docs/DESIGN.md §uploads)."""
    try:
        found = _soundfile_clip(data, max_seconds)
    except UserError:
        raise
    except Exception:  # libsndfile failed part-way: FFmpeg may still read it
        found = None
    if found is not None:
        return found
    try:
        found = _av_clip(data, max_seconds)
    except UserError:
        raise
    except Exception:
        found = None
    if found is None:
        raise UserError("cannot read the voice clip; send WAV, FLAC, OGG, MP3 or another common audio file")
    return found


def _checked_rate(rate) -> int:
    rate = int(rate or 0)
    if not 0 < rate <= MAX_CLIP_RATE:
        raise UserError(f"the clip's sample rate is {rate} Hz; the most is {MAX_CLIP_RATE} Hz: resample it")
    return rate


def _soundfile_clip(data: bytes, max_seconds: float) -> tuple[np.ndarray, int] | None:
    """None where libsndfile does not know the format."""
    import soundfile

    try:
        clip = soundfile.SoundFile(io.BytesIO(data))
    except Exception:
        return None
    with clip:
        rate = _checked_rate(clip.samplerate)
        if clip.frames > max_seconds * rate:  # an unknown length is refused here too
            raise ClipTooLong(None if clip.frames == UNKNOWN_FRAMES else clip.frames / rate, max_seconds)
        block = np.empty((max(1, BLOCK_SAMPLES // clip.channels), clip.channels), dtype=np.float32)
        return _bounded(_mono_blocks(clip, block), rate, max_seconds), rate


def _mono_blocks(clip, block: np.ndarray):
    while True:
        got = clip.read(out=block)  # a view of `block`: copied out (or mixed down) before the next read
        if not len(got):
            return
        # the channels-first mean of read_audio + to_mono, so the samples equal a whole-file read's
        yield got[:, 0].copy() if got.shape[1] == 1 else np.ascontiguousarray(got.T).mean(axis=0)


def _av_clip(data: bytes, max_seconds: float) -> tuple[np.ndarray, int] | None:
    """FFmpeg's demuxers and decoders, mixed down to mono by its resampler frame by frame (its channel
    matrix, not a plain mean); None where the container has no audio."""
    import av

    with av.open(io.BytesIO(data)) as container:
        if not container.streams.audio:
            return None
        stream = container.streams.audio[0]
        rate = _checked_rate(stream.rate)
        if container.duration is not None and container.duration / av.time_base > max_seconds:
            raise ClipTooLong(container.duration / av.time_base, max_seconds)
        resampler = av.AudioResampler(format="fltp", layout="mono", rate=rate)

        def pieces():
            for frame in container.decode(stream):
                for mono in resampler.resample(frame):
                    yield mono.to_ndarray()[0]
            for mono in resampler.resample(None):
                yield mono.to_ndarray()[0]

        wav = _bounded(pieces(), rate, max_seconds)
    return (wav, rate) if len(wav) else None


def _bounded(pieces, rate: int, max_seconds: float) -> np.ndarray:
    """The pieces joined, or ClipTooLong as soon as they pass max_seconds (the rest is never decoded)."""
    most, count, kept = int(max_seconds * rate), 0, []
    for piece in pieces:
        count += len(piece)
        if count > most:
            raise ClipTooLong(None, max_seconds)
        kept.append(np.asarray(piece, dtype=np.float32))
    return np.concatenate(kept) if kept else np.zeros(0, dtype=np.float32)


def to_mono(wav: np.ndarray) -> np.ndarray:
    """A mono 1-D float32 waveform from [samples] or channels-first [channels, samples] (channel mean)."""
    wav = np.asarray(wav, dtype=np.float32)
    if wav.ndim == 1:
        return wav
    if wav.ndim != 2:
        raise UserError(f"a waveform must be [samples] or [channels, samples], got shape {list(wav.shape)}")
    return wav[0] if wav.shape[0] == 1 else wav.mean(axis=0)


def _sinc_kernel(orig: int, new: int, lowpass_filter_width: int, rolloff: float) -> tuple[np.ndarray, int]:
    """torchaudio's polyphase windowed-sinc filter bank [new, 2 * width + orig] for reduced rates orig -> new."""
    base_freq = min(orig, new) * rolloff
    width = math.ceil(lowpass_filter_width * orig / base_freq)
    taps = np.arange(-width, width + orig, dtype=np.float64) / orig
    phases = np.arange(0, -new, -1, dtype=np.float64)[:, None] / new
    t = np.clip((phases + taps) * base_freq, -lowpass_filter_width, lowpass_filter_width)
    window = np.cos(t * math.pi / lowpass_filter_width / 2) ** 2
    t = t * math.pi
    safe_t = np.where(t == 0, 1.0, t)
    sinc = np.where(t == 0, 1.0, np.sin(safe_t) / safe_t)
    return (sinc * window * (base_freq / orig)).astype(np.float32), width


def resample(
    wav: np.ndarray, orig_sr: int, new_sr: int, lowpass_filter_width: int = 6, rolloff: float = 0.99
) -> np.ndarray:
    """Band-limited resampling of a 1-D waveform, as torchaudio.functional.resample (within float32 rounding)."""
    if orig_sr <= 0 or new_sr <= 0:
        raise UserError(f"sample rates must be positive, got {orig_sr} -> {new_sr}")
    if orig_sr == new_sr:
        return wav
    divisor = math.gcd(int(orig_sr), int(new_sr))
    orig, new = int(orig_sr) // divisor, int(new_sr) // divisor
    kernel, width = _sinc_kernel(orig, new, lowpass_filter_width, rolloff)
    padded = np.pad(wav.astype(np.float32, copy=False), (width, width + orig))
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel.shape[1])[::orig]
    resampled = (windows @ kernel.T).ravel()
    # torchaudio rounds the target length through a float32 tensor before ceil().
    target_len = math.ceil(float(np.float32(new * len(wav) / orig)))
    return np.ascontiguousarray(resampled[:target_len])


def load_audio(path: str | os.PathLike, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """A file as a mono float32 waveform at `sample_rate`."""
    wav, file_rate = read_audio(path)
    return resample(to_mono(wav), file_rate, sample_rate)


def rms(wav: np.ndarray) -> float:
    return float(np.sqrt(np.mean(wav**2))) if wav.size else 0.0


def cut_to_hops(wav: np.ndarray, hop_length: int = HOP_LENGTH) -> np.ndarray:
    """Drop the tail that does not fill a whole codec frame."""
    return wav[: len(wav) - len(wav) % hop_length]


# ---------------------------------------------------------------------------
# pydub's arithmetic on 16-bit PCM, reproduced
# ---------------------------------------------------------------------------


def _to_pcm16(wav: np.ndarray) -> np.ndarray:
    # astype truncates toward zero, as upstream's conversion does.
    return (wav * 32768.0).clip(-32768, 32767).astype(np.int16)


def _from_pcm16(pcm: np.ndarray) -> np.ndarray:
    return pcm.astype(np.float32) / 32768.0


def _length_ms(num_samples: int, sample_rate: int) -> int:
    return round(1000 * (float(num_samples) / sample_rate))


def _ms_to_samples(ms: float, sample_rate: int) -> int:
    return int(ms * (sample_rate / 1000.0))


def _slice_ms(pcm: np.ndarray, sample_rate: int, start_ms: int = 0, end_ms: int | None = None) -> np.ndarray:
    """pydub's `segment[start_ms:end_ms]`: bounds clipped to the rounded length in ms,
    and zero samples appended when that length reaches past the last sample."""
    length = _length_ms(len(pcm), sample_rate)
    start_ms = min(start_ms, length)
    end_ms = length if end_ms is None else min(end_ms, length)
    start = _ms_to_samples(start_ms, sample_rate)
    end = _ms_to_samples(end_ms, sample_rate)
    piece = pcm[start:end]
    missing = (end - start) - len(piece)
    if missing > 0:
        piece = np.concatenate([piece, np.zeros(missing, dtype=pcm.dtype)])
    return piece


def _window_rms(pcm: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """audioop.rms of pcm[start:end] zero-padded to end - start samples: floor(sqrt(mean square)), 0 when empty."""
    squares = np.concatenate([[0], np.cumsum(pcm.astype(np.int64) ** 2)])
    n = len(pcm)
    sums = squares[np.minimum(ends, n)] - squares[np.minimum(starts, n)]
    counts = ends - starts
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.floor(np.sqrt(sums.astype(np.float64) / counts))
    return np.where(counts > 0, values, 0.0)


def _silence_amplitude(silence_dbfs: float) -> float:
    # pydub compares an integer RMS with this amplitude ("<=" when detecting silence) or its
    # dBFS with silence_dbfs ("<" at the edges); both reduce to comparisons with this number.
    return 10 ** (silence_dbfs / 20) * 32768


def _silent_ranges(pcm, sample_rate, min_silence_ms, silence_dbfs, seek_step_ms) -> list[list[int]]:
    """pydub.silence.detect_silence: [start_ms, end_ms] runs where every min_silence_ms window is quiet."""
    length = _length_ms(len(pcm), sample_rate)
    if length < min_silence_ms:
        return []
    last_start = length - min_silence_ms
    window_starts = list(range(0, last_start + 1, seek_step_ms))
    if last_start % seek_step_ms:
        window_starts.append(last_start)
    starts_ms = np.asarray(window_starts)
    ends_ms = np.minimum(starts_ms + min_silence_ms, length)
    to_samples = sample_rate / 1000.0
    values = _window_rms(pcm, (starts_ms * to_samples).astype(np.int64), (ends_ms * to_samples).astype(np.int64))
    quiet_starts = starts_ms[values <= _silence_amplitude(silence_dbfs)].tolist()
    if not quiet_starts:
        return []
    ranges = []
    range_start = previous = quiet_starts[0]
    for start in quiet_starts[1:]:
        touches = start == previous + seek_step_ms or start <= previous + min_silence_ms
        if not touches:
            ranges.append([range_start, previous + min_silence_ms])
            range_start = start
        previous = start
    ranges.append([range_start, previous + min_silence_ms])
    return ranges


def nonsilent_ranges(pcm, sample_rate, min_silence_ms, silence_dbfs, seek_step_ms) -> list[list[int]]:
    """pydub.silence.detect_nonsilent on int16 samples: [start_ms, end_ms] of the sounding parts."""
    length = _length_ms(len(pcm), sample_rate)
    silent = _silent_ranges(pcm, sample_rate, min_silence_ms, silence_dbfs, seek_step_ms)
    if not silent:
        return [[0, length]]
    if silent[0] == [0, length]:
        return []
    ranges, previous_end = [], 0
    for start, end in silent:
        ranges.append([previous_end, start])
        previous_end = end
    if silent[-1][1] != length:
        ranges.append([previous_end, length])
    if ranges[0] == [0, 0]:
        ranges.pop(0)
    return ranges


def _leading_silence_ms(pcm, sample_rate, silence_dbfs, chunk_ms=10) -> int:
    """pydub.silence.detect_leading_silence: where the first non-quiet chunk_ms chunk starts."""
    length = _length_ms(len(pcm), sample_rate)
    starts_ms = np.arange(0, length, chunk_ms)
    ends_ms = np.minimum(starts_ms + chunk_ms, length)
    to_samples = sample_rate / 1000.0
    values = _window_rms(pcm, (starts_ms * to_samples).astype(np.int64), (ends_ms * to_samples).astype(np.int64))
    loud = np.flatnonzero(values >= _silence_amplitude(silence_dbfs))
    return int(starts_ms[loud[0]]) if loud.size else length


def _split_on_silence(pcm, sample_rate, min_silence_ms, silence_dbfs, keep_silence_ms, seek_step_ms):
    """pydub.silence.split_on_silence: sounding parts with up to keep_silence_ms of quiet on each side."""
    ranges = [
        [start - keep_silence_ms, end + keep_silence_ms]
        for start, end in nonsilent_ranges(pcm, sample_rate, min_silence_ms, silence_dbfs, seek_step_ms)
    ]
    for before, after in zip(ranges, ranges[1:]):
        if after[0] < before[1]:  # kept silences overlap: meet halfway
            before[1] = (before[1] + after[0]) // 2
            after[0] = before[1]
    length = _length_ms(len(pcm), sample_rate)
    return [_slice_ms(pcm, sample_rate, max(start, 0), min(end, length)) for start, end in ranges]


def _trim_edges(pcm, sample_rate, lead_ms, trail_ms, silence_dbfs) -> np.ndarray:
    start = max(0, _leading_silence_ms(pcm, sample_rate, silence_dbfs) - lead_ms)
    pcm = _slice_ms(pcm, sample_rate, start)
    backwards = pcm[::-1]
    start = max(0, _leading_silence_ms(backwards, sample_rate, silence_dbfs) - trail_ms)
    return _slice_ms(backwards, sample_rate, start)[::-1]


# ---------------------------------------------------------------------------
# Upstream's audio steps
# ---------------------------------------------------------------------------


def remove_silence(
    wav: np.ndarray, sample_rate: int, mid_sil_ms: int = 300, lead_sil_ms: int = 100, trail_sil_ms: int = 300
) -> np.ndarray:
    """Shorten inner silences longer than mid_sil_ms to mid_sil_ms on each side of the sound,
    then keep at most lead_sil_ms / trail_sil_ms of silence at the edges. Output is 16-bit quantised.

    Equal to upstream at sample rates >= 11025 Hz (pydub would resample slower audio
    when joining the pieces); generation only calls it at 24 kHz."""
    pcm = _to_pcm16(wav)
    if mid_sil_ms > 0:
        pieces = _split_on_silence(pcm, sample_rate, mid_sil_ms, SILENCE_DBFS, mid_sil_ms, SEEK_STEP_MS)
        pcm = np.concatenate(pieces) if pieces else pcm[:0]
    return _from_pcm16(_trim_edges(pcm, sample_rate, lead_sil_ms, trail_sil_ms, SILENCE_DBFS))


def trim_long_audio(
    wav: np.ndarray,
    sample_rate: int,
    max_duration: float = 15.0,
    min_duration: float = 3.0,
    trim_threshold: float = 20.0,
) -> np.ndarray:
    """Audio longer than trim_threshold s is cut to at most max_duration s, at the start of
    the last sound that begins before max_duration (or at max_duration if that is under min_duration)."""
    if len(wav) / sample_rate <= trim_threshold:
        return wav
    pcm = _to_pcm16(wav)
    sounds = nonsilent_ranges(pcm, sample_rate, min_silence_ms=100, silence_dbfs=-40.0, seek_step_ms=SEEK_STEP_MS)
    if not sounds:
        return wav
    max_ms, min_ms = int(max_duration * 1000), int(min_duration * 1000)
    cut_ms = 0
    for start, end in sounds:
        if cut_ms < start <= max_ms:
            cut_ms = start
        if end > max_ms:
            break
    if cut_ms < min_ms:
        cut_ms = min(max_ms, _length_ms(len(pcm), sample_rate))
    return _from_pcm16(_slice_ms(pcm, sample_rate, 0, cut_ms))


def fade_and_pad(
    wav: np.ndarray, pad_duration: float = 0.1, fade_duration: float = 0.1, sample_rate: int = SAMPLE_RATE
) -> np.ndarray:
    """Linear fade-in/out (at most half the length each) and silence padding on both sides, against clicks."""
    if len(wav) == 0:
        return wav
    fade_len = int(fade_duration * sample_rate)
    pad_len = int(pad_duration * sample_rate)
    out = wav.copy()
    ramp_len = min(fade_len, len(out) // 2)
    if fade_len > 0 and ramp_len > 0:
        out[:ramp_len] *= np.linspace(0, 1, ramp_len, dtype=np.float32)
        out[-ramp_len:] *= np.linspace(1, 0, ramp_len, dtype=np.float32)
    if pad_len > 0:
        silence = np.zeros(pad_len, dtype=out.dtype)
        out = np.concatenate([silence, out, silence])
    return out


def cross_fade_chunks(
    chunks: list[np.ndarray], sample_rate: int = SAMPLE_RATE, silence_duration: float = CROSS_FADE_GAP_S
) -> np.ndarray:
    """Join chunk audio: each boundary fades out, leaves a gap of silence, fades in (each a third of the gap)."""
    if len(chunks) == 1:
        return chunks[0]
    third = int(silence_duration * sample_rate) // 3
    merged = chunks[0].copy()
    for chunk in chunks[1:]:
        fade_out_len = min(third, len(merged))
        if fade_out_len > 0:
            merged[-fade_out_len:] *= np.linspace(1, 0, fade_out_len, dtype=np.float32)
        incoming = chunk.copy()
        fade_in_len = min(third, len(incoming))
        if fade_in_len > 0:
            incoming[:fade_in_len] *= np.linspace(0, 1, fade_in_len, dtype=np.float32)
        merged = np.concatenate([merged, np.zeros(third, dtype=np.float32), incoming])
    return merged


def match_loudness(wav: np.ndarray, ref_rms: float | None) -> np.ndarray:
    """A quiet reference (RMS < 0.1, raised before encoding) lowers the output by the same factor;
    without a reference the output peaks at 0.5."""
    if ref_rms is not None:
        return wav * ref_rms / REF_RMS_FLOOR if ref_rms < REF_RMS_FLOOR else wav
    # Upstream fails on an empty output here (max of nothing); empty stays empty.
    peak = np.abs(wav).max() if wav.size else 0.0
    return wav / peak * PEAK_WITHOUT_REFERENCE if peak > 1e-6 else wav


def post_process(
    wav: np.ndarray, ref_rms: float | None, settings: GenerationSettings, sample_rate: int = SAMPLE_RATE
) -> np.ndarray:
    """Upstream's `_post_process_audio` on decoded audio: silence removal, loudness, fades and padding."""
    if settings.postprocess_output:
        wav = remove_silence(wav, sample_rate, mid_sil_ms=500, lead_sil_ms=100, trail_sil_ms=100)
    wav = match_loudness(wav, ref_rms)
    return fade_and_pad(wav, settings.pad_duration, settings.fade_duration, sample_rate)


def clean_reference(
    wav: np.ndarray,
    sample_rate: int,
    preprocess_prompt: bool = True,
    ref_text_known: bool = True,
    target_rate: int = SAMPLE_RATE,
) -> tuple[np.ndarray, float]:
    """(24 kHz waveform, ref_rms): upstream's `create_voice_clone_prompt` up to where it transcribes.

    Mono, resampled to 24 kHz; ref_rms is measured there, and a quieter
    reference is raised to RMS 0.1. With preprocess_prompt, silences are
    shortened (inner 200 ms, lead 100 ms, trail 200 ms); references over 20 s
    are cut at a pause only when there is no transcript (`ref_text_known`
    False), since a cut would no longer match it.
    """
    wav = resample(to_mono(wav), sample_rate, target_rate)
    ref_rms = rms(wav)
    if 0 < ref_rms < REF_RMS_FLOOR:
        wav = wav * REF_RMS_FLOOR / ref_rms
    if preprocess_prompt:
        if not ref_text_known:
            wav = trim_long_audio(wav, target_rate, trim_threshold=LONG_REFERENCE_S)
        wav = remove_silence(wav, target_rate, mid_sil_ms=200, lead_sil_ms=100, trail_sil_ms=200)
        if len(wav) == 0:
            raise UserError(
                "reference audio is empty after silence removal; check the file or turn off prompt preprocessing"
            )
    duration = len(wav) / target_rate
    if duration > LONG_REFERENCE_S:
        logger.warning(
            "reference audio is %.1f s long (> 20 s): generation is slower and cloning worse; 3-10 s works best",
            duration,
        )
    return wav, ref_rms


def whole_hops(wav: np.ndarray, hop_length: int = HOP_LENGTH, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """The reference cut to whole codec hops, as upstream does before encoding; nothing left is an error."""
    wav = cut_to_hops(wav, hop_length)
    if len(wav) == 0:
        raise UserError(f"reference audio is shorter than one codec frame ({hop_length} samples at {sample_rate} Hz)")
    return wav

