"""codes.runtime.audio.processing against upstream's utils/audio.py (pydub), torchaudio resampling and post-processing."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import soundfile
import torch
import torchaudio
from helpers import clips
from helpers.upstream_twins import upstream_self

from omnivoice.models.omnivoice import OmniVoiceGenerationConfig
from omnivoice.utils import audio as upstream_audio

from codes.checks import hostile_clips
from codes.common.errors import UserError
from codes.runtime.audio import processing as audio
from codes.runtime.contract.settings import GenerationSettings

SR = 24000


def speechlike(seed: int, seconds: float, sample_rate: int = SR, level: float = 0.3) -> np.ndarray:
    """Bursts of tones separated by pauses of 20-900 ms, with room noise near -50 dBFS and
    a length that is not a whole number of milliseconds (pydub's rounding matters)."""
    rng = np.random.default_rng(seed)
    total = int(seconds * sample_rate) + int(rng.integers(1, 24))
    wav = np.zeros(total, dtype=np.float32)
    position = int(rng.integers(0, sample_rate // 2))
    while position < total:
        burst = int(rng.uniform(0.05, 1.2) * sample_rate)
        t = np.arange(min(burst, total - position)) / sample_rate
        tone = np.sin(2 * np.pi * rng.uniform(100, 800) * t) * rng.uniform(0.2, 1.0) * level
        wav[position : position + len(tone)] = tone
        position += burst + int(rng.uniform(0.02, 0.9) * sample_rate)
    noise_level = 10 ** (rng.uniform(-58, -46) / 20)  # straddles the -50 dBFS threshold
    wav += (rng.standard_normal(total) * noise_level).astype(np.float32)
    return wav


def stereo_speechlike(seed: int, seconds: float, sample_rate: int) -> np.ndarray:
    left, right = speechlike(seed, seconds, sample_rate), speechlike(seed + 1, seconds, sample_rate)
    length = min(len(left), len(right))
    return np.stack([left[:length], right[:length]])


def _upstream_mono(function, wav, *args, **kwargs) -> np.ndarray:
    out = function(wav[None, :], *args, **kwargs)
    assert out.shape[0] == 1
    return out[0]


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("silences", [(500, 100, 100), (200, 100, 200), (300, 100, 300), (0, 100, 100)])
def test_remove_silence_equals_pydub_sample_for_sample(seed, silences):
    wav = speechlike(seed, seconds=4.0 + seed)
    expected = _upstream_mono(upstream_audio.remove_silence, wav, SR, *silences)
    ours = audio.remove_silence(wav, SR, *silences)
    assert ours.dtype == np.float32
    np.testing.assert_array_equal(ours, expected)


@pytest.mark.parametrize(
    "wav",
    [
        np.zeros(24000, np.float32),
        np.zeros(0, np.float32),
        np.full(30, 0.5, np.float32),
        np.full(24013, 0.9, np.float32),
    ],
    ids=["silent", "empty", "tiny", "loud_unrounded_length"],
)
def test_remove_silence_edge_cases_equal_pydub(wav):
    expected = _upstream_mono(upstream_audio.remove_silence, wav, SR, 500, 100, 100)
    np.testing.assert_array_equal(audio.remove_silence(wav, SR, 500, 100, 100), expected)


def test_remove_silence_quantises_like_pydub():
    wav = np.array([0.5, -0.5, 1.5, -1.5, 1e-5, -1e-5, 0.123456], dtype=np.float32).repeat(4000)
    expected = _upstream_mono(upstream_audio.remove_silence, wav, SR, 0, 1000, 1000)
    np.testing.assert_array_equal(audio.remove_silence(wav, SR, 0, 1000, 1000), expected)


@pytest.mark.parametrize("seed", range(4))
def test_trim_long_audio_equals_upstream(seed):
    wav = speechlike(100 + seed, seconds=21.0 + 3 * seed)
    expected = _upstream_mono(upstream_audio.trim_long_audio, wav, SR, trim_threshold=20.0)
    np.testing.assert_array_equal(audio.trim_long_audio(wav, SR, trim_threshold=20.0), expected)
    short = speechlike(seed, seconds=5.0)
    assert audio.trim_long_audio(short, SR) is short


@pytest.mark.parametrize("length", [0, 1, 7, 4800, 24001])
@pytest.mark.parametrize("pad, fade", [(0.1, 0.1), (0.0, 0.1), (0.1, 0.0), (0.25, 0.5)])
def test_fade_and_pad_equals_upstream(length, pad, fade):
    wav = np.random.default_rng(length).uniform(-1, 1, length).astype(np.float32)
    expected = _upstream_mono(
        upstream_audio.fade_and_pad_audio, wav, pad_duration=pad, fade_duration=fade, sample_rate=SR
    )
    np.testing.assert_array_equal(audio.fade_and_pad(wav, pad, fade, SR), expected)


@pytest.mark.parametrize("lengths", [[5000], [5000, 300], [10, 24000, 2400], [24000, 24000, 24000, 1]])
def test_cross_fade_chunks_equals_upstream(lengths):
    rng = np.random.default_rng(len(lengths))
    chunks = [rng.uniform(-1, 1, n).astype(np.float32) for n in lengths]
    expected = upstream_audio.cross_fade_chunks([c[None, :].copy() for c in chunks], SR)[0]
    np.testing.assert_array_equal(audio.cross_fade_chunks([c.copy() for c in chunks], SR), expected)


@pytest.mark.parametrize("ref_rms", [None, 0.02, 0.1, 0.3, 0.0])
@pytest.mark.parametrize("postprocess_output", [True, False])
def test_post_process_equals_upstream(ref_rms, postprocess_output):
    wav = speechlike(7, seconds=3.0, level=0.8)
    config = OmniVoiceGenerationConfig(postprocess_output=postprocess_output)
    expected = upstream_self()._post_process_audio(wav[None, :].copy(), ref_rms, config)[0]
    settings = GenerationSettings(postprocess_output=postprocess_output)
    np.testing.assert_array_equal(audio.post_process(wav.copy(), ref_rms, settings, SR), expected)


def test_post_process_survives_all_silent_output_without_reference():
    settings = GenerationSettings()
    out = audio.post_process(np.zeros(24000, np.float32), None, settings, SR)
    assert out.size == 0


@pytest.mark.parametrize(
    "orig_sr, new_sr", [(44100, 24000), (48000, 24000), (16000, 24000), (22050, 24000), (8000, 24000), (24000, 16000)]
)
def test_resample_matches_torchaudio(orig_sr, new_sr):
    wav = speechlike(3, seconds=1.3, sample_rate=orig_sr)
    expected = torchaudio.functional.resample(torch.from_numpy(wav)[None], orig_sr, new_sr)[0].numpy()
    ours = audio.resample(wav, orig_sr, new_sr)
    assert ours.dtype == np.float32 and ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, atol=2e-6)


def test_resample_length_follows_torchaudio_float32_rounding():
    # 80 * 1_000_001 / 147 = 544218.2...; torchaudio's ceil goes through float32.
    for length in (1, 146, 147, 148, 1_000_001, 2_000_003):
        wav = np.zeros(length, np.float32)
        expected = torchaudio.functional.resample(torch.from_numpy(wav)[None], 44100, 24000).shape[-1]
        assert len(audio.resample(wav, 44100, 24000)) == expected


def test_read_and_load_audio_match_upstream(tmp_path):
    stereo = stereo_speechlike(1, 1.0, 44100)
    path = tmp_path / "stereo.wav"
    soundfile.write(path, stereo.T, 44100, subtype="FLOAT")
    expected = upstream_audio.load_audio(str(path), SR)[0]
    np.testing.assert_allclose(audio.load_audio(path, SR), expected, atol=2e-6)
    wav, rate = audio.read_audio(path)
    assert rate == 44100
    np.testing.assert_array_equal(wav, stereo)
    with pytest.raises(UserError, match="not found"):
        audio.read_audio(tmp_path / "missing.wav")
    (tmp_path / "junk.wav").write_bytes(b"not audio")
    with pytest.raises(UserError, match="cannot read"):
        audio.read_audio(tmp_path / "junk.wav")


class _CapturingCodec:
    """Upstream's audio_tokenizer, reduced to recording what it is asked to encode."""

    def __init__(self):
        self.config = SimpleNamespace(hop_length=960)
        self.device = "cpu"
        self.encoded = None

    def encode(self, wav):
        self.encoded = wav[0, 0].numpy()
        return SimpleNamespace(audio_codes=torch.zeros(1, 8, wav.shape[-1] // 960, dtype=torch.long))


def _upstream_reference(wav, sample_rate, ref_text, preprocess_prompt=True):
    codec = _CapturingCodec()
    upstream = upstream_self(audio_tokenizer=codec, _asr_pipe=object(), transcribe=lambda _: "asr text")
    prompt = upstream.create_voice_clone_prompt((torch.from_numpy(wav), sample_rate), ref_text, preprocess_prompt)
    return codec.encoded, prompt.ref_rms


@pytest.mark.parametrize(
    "seed, seconds, level, ref_text, preprocess",
    [
        (0, 4.0, 0.3, "Some words.", True),  # loud enough: no RMS change
        (1, 6.0, 0.05, "Some words.", True),  # quiet: raised to RMS 0.1
        (2, 3.0, 0.3, "Some words.", False),  # no trimming: hop cut only
        (3, 24.0, 0.3, None, True),  # long and no transcript: cut at a pause
        (4, 24.0, 0.3, "Transcript given.", True),  # long with transcript: kept whole
    ],
)
def test_clean_reference_in_whole_hops_at_24k_equals_upstream(seed, seconds, level, ref_text, preprocess):
    wav = speechlike(seed, seconds, level=level)
    expected, expected_rms = _upstream_reference(wav, SR, ref_text, preprocess)
    cleaned, ref_rms = audio.clean_reference(wav, SR, preprocess_prompt=preprocess, ref_text_known=ref_text is not None)
    ours = audio.whole_hops(cleaned)
    assert ref_rms == expected_rms
    assert len(ours) % 960 == 0
    np.testing.assert_array_equal(ours, expected)


def test_clean_reference_resampled_stereo_matches_upstream():
    stereo = stereo_speechlike(5, 3.0, 44100)
    expected, expected_rms = _upstream_reference(stereo, 44100, "Words.")
    cleaned, ref_rms = audio.clean_reference(stereo, 44100)
    ours = audio.whole_hops(cleaned)
    assert ref_rms == pytest.approx(expected_rms, rel=1e-6)
    # Resampling differs from torchaudio by float32 rounding, which can move a 16-bit sample by one step.
    assert ours.shape == expected.shape
    np.testing.assert_allclose(ours, expected, atol=1.5 / 32768)


def test_clean_reference_rejects_silence():
    with pytest.raises(UserError, match="empty after silence removal"):
        audio.clean_reference(np.zeros(48000, np.float32), SR)


def test_cut_to_hops_and_to_mono():
    assert len(audio.cut_to_hops(np.zeros(2000))) == 1920
    stereo = np.stack([np.ones(5, np.float32), np.zeros(5, np.float32)])
    np.testing.assert_array_equal(audio.to_mono(stereo), np.full(5, 0.5, np.float32))
    with pytest.raises(UserError, match="channels"):
        audio.to_mono(np.zeros((1, 2, 3)))


# --- uploaded clips: bounded whatever they claim ------------------------------------------------


@pytest.mark.parametrize("channels", [1, 8])
def test_read_clip_mixes_down_block_by_block_to_what_a_whole_read_gives(tmp_path, channels):
    frames = 3 * audio.BLOCK_SAMPLES // 8 + 17  # several blocks, the last one short
    data, samples = clips.channels_wav(frames, channels, rate=48000)
    wav, rate = audio.read_clip(data, max_seconds=30)
    (tmp_path / "clip.wav").write_bytes(data)
    whole, _ = audio.read_audio(tmp_path / "clip.wav")
    assert rate == 48000 and wav.dtype == np.float32 and wav.ndim == 1
    np.testing.assert_array_equal(wav, audio.to_mono(whole))
    np.testing.assert_array_equal(wav, audio.to_mono(np.ascontiguousarray(samples.T)))


def test_read_clip_refuses_a_long_clip_by_its_header_before_decoding(monkeypatch):
    bomb = hostile_clips.silent_flac(60)  # 8 channels at 192 kHz: 370 MB as float32, a few KB here
    assert len(bomb) < 200_000
    monkeypatch.setattr(audio, "_mono_blocks", lambda *_: pytest.fail("decoded a clip its header refuses"))
    with pytest.raises(audio.ClipTooLong, match="the clip is 60.0 s; the limit is 30 s") as caught:
        audio.read_clip(bomb, max_seconds=30)
    assert caught.value.seconds == 60.0
    with pytest.raises(audio.ClipTooLong, match="over 30 s") as caught:  # a header that gives no length
        audio.read_clip(hostile_clips.with_flac_length(bomb, 0), max_seconds=30)
    assert caught.value.seconds is None


def test_read_clip_stops_decoding_a_lying_container_at_the_limit(monkeypatch):
    lying = hostile_clips.lying_matroska(hostile_clips.silent_flac(20, rate=48000), claimed_seconds=1)
    decoded = []
    bounded = audio._bounded

    def counting(pieces, rate, max_seconds):
        def counted():
            for piece in pieces:
                decoded.append(len(piece))
                yield piece
        return bounded(counted(), rate, max_seconds)

    monkeypatch.setattr(audio, "_bounded", counting)
    with pytest.raises(audio.ClipTooLong, match="over 3 s") as caught:
        audio.read_clip(lying, max_seconds=3)
    assert caught.value.seconds is None
    assert 3 * 48000 < sum(decoded) <= 3 * 48000 + max(decoded)  # one frame past the limit, not 20 s


def test_read_clip_refuses_what_it_cannot_read_or_an_absurd_rate():
    with pytest.raises(UserError, match="cannot read the voice clip"):
        audio.read_clip(b"not audio at all", max_seconds=30)
    data, _ = clips.channels_wav(100, 1, rate=1_000_000)
    with pytest.raises(UserError, match="sample rate is 1000000 Hz; the most is 384000"):
        audio.read_clip(data, max_seconds=30)
