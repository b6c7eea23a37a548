"""The ONNX Higgs codec (codes/export/higgs.py, codes/runtime/audio/codec.py, codes/checks/equiv_codec.py) on the tiny codec."""

from __future__ import annotations

import numpy as np
import pytest
import soxr
from helpers.codec_builds import codec_build, tiny_codec_source

from codes.checks.equiv_codec import FP16_MIN_SNR_DB, codec_equivalence, snr_db
from codes.common.errors import UserError
from codes.common.fileio import sha256_file
from codes.export.generated_higgs import speech_like_signal
from codes.runtime.audio.codec import HiggsCodec, check_files
from codes.runtime.contract.specs import HIGGS_SPECS

SR = 24000


@pytest.fixture(scope="session")
def source(tmp_path_factory):
    return tiny_codec_source(tmp_path_factory)


@pytest.fixture(scope="session")
def fp32(tmp_path_factory):
    folder, section = codec_build(tmp_path_factory, "fp32")
    return HiggsCodec(folder / section["models_dir"], section), folder, section


@pytest.fixture(scope="session")
def fp16(tmp_path_factory):
    folder, section = codec_build(tmp_path_factory, "fp16")
    return HiggsCodec(folder / section["models_dir"], section), folder, section


def test_fp32_codes_and_audio_match_transformers(fp32, source):
    codec, folder, section = fp32
    rows = codec_equivalence(folder / section["models_dir"], section, source, codec=codec)
    failed = [f"{r.check}: {r.note}" for r in rows if not r.passed]
    assert not failed, failed
    encode_rows = [r for r in rows if "encode" in r.check]
    decode_rows = [r for r in rows if "decode" in r.check]
    assert len(encode_rows) == len(decode_rows) == 5  # four lengths and a batch
    assert all(r.argmax_agree == 1.0 for r in encode_rows)
    assert max(r.max_abs for r in decode_rows) <= 1e-4


def test_fp16_decoder_snr_against_fp32(fp32, fp16):
    codec32, codec16 = fp32[0], fp16[0]
    snrs = []
    for seconds, seed in ((0.5, 1), (2.0, 2), (5.0, 3)):
        codes = codec32.encode(speech_like_signal(seconds, seed=seed), SR)
        snrs.append(snr_db(codec32.decode(codes), codec16.decode(codes)))
    print(f"fp16 decoder SNR vs fp32: {', '.join(f'{s:.1f}' for s in snrs)} dB")
    assert min(snrs) >= FP16_MIN_SNR_DB, snrs


def test_manifest_section_describes_the_build(fp32, fp16):
    for codec, folder, section in (fp32, fp16):
        assert (section["sample_rate"], section["semantic_sample_rate"], section["hop_length"]) == (24000, 16000, 960)
        assert (section["frame_rate"], section["num_codebooks"], section["codebook_size"]) == (25, 8, 1024)
        assert section["feature_extractor"]["sampling_rate"] == 24000
        higgs_dir = folder / section["models_dir"]
        for spec in HIGGS_SPECS:
            entry = section["sub_models"][spec.key]
            assert entry["sha256"] == sha256_file(higgs_dir / entry["filename"])
            assert [t["name"] for t in entry["inputs"]] == spec.input_names
            # keep_io_types: every float tensor crosses the graph boundary as float32
            assert {t["dtype"] for t in entry["inputs"] + entry["outputs"]} <= {"float32", "int64"}
        check_files(higgs_dir, section)
    precisions = {key: entry["precision"] for key, entry in fp16[2]["sub_models"].items()}
    assert precisions == {"acoustic_encoder": "fp16", "semantic_encoder": "fp16",
                          "quantizer_encoder": "fp32", "higgs_decoder": "fp16"}
    assert {entry["precision"] for entry in fp32[2]["sub_models"].values()} == {"fp32"}


def test_tiny_codec_is_not_degenerate(fp32):
    """Random-init traps (zero codebooks, ~1e-6 activations) would make parity vacuous."""
    codec = fp32[0]
    codes = codec.encode(speech_like_signal(3.0, seed=9), SR)
    assert min(len(np.unique(row)) for row in codes) > 30
    other = codec.encode(speech_like_signal(3.0, seed=10), SR)
    assert (codes == other).mean() < 0.1
    assert 0.02 < float(np.sqrt(np.mean(codec.decode(codes) ** 2))) < 1.0


def test_stereo_and_other_rates_are_converted(fp32):
    codec = fp32[0]
    mono = speech_like_signal(2.0, sample_rate=44100, seed=4)
    stereo = np.stack([mono * 1.2, mono * 0.8])  # [channels, samples]; mixes to `mono`
    codes = codec.encode(stereo, 44100)
    expected_frames = len(soxr.resample(mono, 44100, SR)) // 960
    assert codes.shape == (8, expected_frames) and codes.dtype == np.int64
    resampled = soxr.resample(mono, 44100, SR).astype(np.float32)
    np.testing.assert_array_equal(codes, codec.encode(resampled, SR))


def test_partial_hop_is_cut_like_upstream(fp32):
    codec = fp32[0]
    wav = speech_like_signal(1.0, seed=5)
    np.testing.assert_array_equal(codec.encode(wav[: 960 * 20 + 959], SR), codec.encode(wav[: 960 * 20], SR))
    assert codec.encode(wav[:960], SR).shape == (8, 1)


def test_batches_equal_single_runs(fp32):
    codec = fp32[0]
    clips = [speech_like_signal(s, seed=i) for i, s in enumerate((1.0, 0.6, 1.0, 1.02))]
    batch_codes = codec.encode_batch(clips, SR)
    for clip, codes in zip(clips, batch_codes):
        np.testing.assert_array_equal(codes, codec.encode(clip, SR))
    audio = codec.decode_batch(batch_codes)
    for codes, wav in zip(batch_codes, audio):
        assert wav.shape == (codes.shape[1] * 960,)
        np.testing.assert_allclose(wav, codec.decode(codes), atol=1e-5)
    same_len = np.stack([batch_codes[0], batch_codes[2]])
    assert codec.decode(same_len).shape == (2, 25 * 960)


@pytest.mark.parametrize("codes, message", [
    (np.zeros((7, 5), np.int64), "shape"),
    (np.zeros((8, 0), np.int64), "shape"),
    (np.zeros((2, 3, 8, 5), np.int64), "shape"),
    (np.zeros((8, 5), np.float32), "integers"),
    (np.full((8, 5), 1024, np.int64), "0..1023"),
    (np.full((8, 5), -1, np.int64), "0..1023"),
])
def test_bad_codes_are_one_line_errors(fp32, codes, message):
    with pytest.raises(UserError, match=message) as info:
        fp32[0].decode(codes)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("waveform, rate, message", [
    (np.zeros(959, np.float32), SR, "at least one 960-sample hop"),
    (np.zeros(1700, np.float32), 44100, "at least one 960-sample hop"),
    (np.zeros((2, 3, 4000), np.float32), SR, "shape"),
    (np.zeros(4000, np.int16), SR, "floats"),
    (np.full(4000, np.nan, np.float32), SR, "NaN"),
])
def test_bad_waveforms_are_one_line_errors(fp32, waveform, rate, message):
    with pytest.raises(UserError, match=message):
        fp32[0].encode(waveform, rate)
