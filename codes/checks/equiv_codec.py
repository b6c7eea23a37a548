"""The codec build against transformers' HiggsAudioV2TokenizerModel (build-time: needs torch).

Both sides get the same speech-like signals: several lengths, some not a whole number
of hops, and a batch. The ONNX side goes through the runtime (`HiggsCodec.encode`
cuts the tail hop as upstream's `create_voice_clone_prompt` does before it calls
`encode`), the upstream side gets the cut waveform. Decoding is compared on upstream's
codes, so a decode row does not inherit an encode difference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codes.checks.report import FP32_ABS_BOUND, Row, relative_error
from codes.export.generated_higgs import speech_like_signal
from codes.runtime.audio.codec import HiggsCodec
from codes.runtime.contract.specs import ACOUSTIC_ENCODER, HIGGS_DECODER

# fp16 decoded audio against fp32 upstream must keep 40 dB SNR (docs/DESIGN.md §bounds).
FP16_MIN_SNR_DB = 40.0
# Lengths in samples at 24 kHz: whole hops and not (9.25, 62.5 and 150.4 hops).
SIGNAL_SAMPLES = (8880, 24000, 60000, 144384)
BATCH = (3, 36000)  # clips x samples, encoded and decoded as one batch


def snr_db(ref: np.ndarray, ours: np.ndarray) -> float:
    noise = float(np.sum((np.asarray(ref, np.float64) - ours) ** 2))
    signal = float(np.sum(np.asarray(ref, np.float64) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(signal / max(noise, 1e-300))


def _encode_row(check: str, precision: str, ours: np.ndarray, ref: np.ndarray, note: str) -> Row:
    same_shape = ours.shape == ref.shape
    agree = float((ours == ref).mean()) if same_shape else 0.0
    row = Row(check, precision, argmax_agree=agree, note=note if same_shape else f"{note}; shapes {ours.shape} vs {ref.shape}")
    if precision == "fp32":
        row.bound, row.passed = "codes equal", same_shape and agree == 1.0
    return row


def _decode_row(check: str, precision: str, ours: np.ndarray, ref: np.ndarray, note: str) -> Row:
    diff = ours.astype(np.float64) - ref
    snr = snr_db(ref, ours)
    row = Row(check, precision, max_abs=float(np.abs(diff).max()), rel_err=relative_error(diff, ref),
              note=f"{note}; SNR {snr:.1f} dB")
    if precision == "fp32":
        row.bound, row.passed = f"max abs <= {FP32_ABS_BOUND:g}", row.max_abs <= FP32_ABS_BOUND
    else:
        row.bound, row.passed = f"SNR >= {FP16_MIN_SNR_DB:g} dB", snr >= FP16_MIN_SNR_DB
    return row


def codec_equivalence(higgs_dir, section: dict, source_dir, codec: HiggsCodec | None = None) -> list[Row]:
    """Rows comparing the ONNX codec in `higgs_dir` with upstream's codec in `source_dir`."""
    import torch
    from transformers import HiggsAudioV2TokenizerModel

    upstream = HiggsAudioV2TokenizerModel.from_pretrained(str(Path(source_dir))).eval()
    codec = codec or HiggsCodec(higgs_dir, section)
    hop = codec.hop_length
    graphs, default = section["sub_models"], section.get("precision", "?")  # a published folder may not say
    enc_precision = graphs[ACOUSTIC_ENCODER.key].get("precision", default)
    dec_precision = graphs[HIGGS_DECODER.key].get("precision", default)

    def upstream_codes(batch: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return upstream.encode(torch.from_numpy(batch)[:, None, :], return_dict=False).numpy()

    def upstream_audio(codes: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return upstream.decode(torch.from_numpy(codes), return_dict=False)[:, 0, :].numpy()

    rows = []
    for i, samples in enumerate(SIGNAL_SAMPLES):
        wav = speech_like_signal(samples / codec.sample_rate, seed=100 + i)[:samples]
        cut = wav[: samples // hop * hop]
        label = f"{samples / codec.sample_rate:.2f} s"
        note = f"{samples} samples = {samples / hop:g} hops, cut to {len(cut) // hop}"
        ref_codes = upstream_codes(cut[None])
        rows.append(_encode_row(f"codec encode {label}", enc_precision, codec.encode(wav, codec.sample_rate)[None],
                                ref_codes, note))
        rows.append(_decode_row(f"codec decode {label}", dec_precision, codec.decode(ref_codes), upstream_audio(ref_codes),
                                f"{ref_codes.shape[-1]} frames"))

    clips, samples = BATCH
    batch = np.stack([speech_like_signal(samples / codec.sample_rate, seed=200 + j)[:samples] for j in range(clips)])
    ref_codes = upstream_codes(batch[:, : samples // hop * hop])
    ours = np.stack(codec.encode_batch(list(batch), codec.sample_rate))
    note = f"{clips} clips of {samples} samples = {samples / hop:g} hops, cut to {samples // hop}, in one run"
    rows.append(_encode_row("codec encode batch", enc_precision, ours, ref_codes, note))
    rows.append(_decode_row("codec decode batch", dec_precision, codec.decode(ref_codes), upstream_audio(ref_codes), note))
    return rows
