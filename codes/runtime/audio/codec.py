"""The Higgs Audio V2 codec at runtime: ONNX Runtime, numpy and soxr, no torch.

    codec = HiggsCodec(higgs_dir, section)        # section: the manifest's "higgs_tokenizer" entry
    codes = codec.encode(waveform, sample_rate)   # [8, T] int64
    audio = codec.decode(codes)                   # [T * 960] float32 at 24 kHz

Any channel count and sample rate go in: channels are averaged, the rate is converted
with soxr, and the tail that does not fill a whole 960-sample hop is dropped, as
upstream does before it encodes a reference. Bad input is a one-line UserError.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.runtime.audio.processing import cut_to_hops, to_mono
from codes.runtime.contract import kernel_graphs, native_kernels
from codes.runtime.contract.sessions import open_with_kernels
from codes.runtime.contract.specs import ACOUSTIC_ENCODER, HIGGS_DECODER, HIGGS_SPECS, QUANTIZER_ENCODER, SEMANTIC_ENCODER


def check_files(higgs_dir, section: dict) -> None:
    """Every graph the section names exists (hashes are read_manifest's job, done once per folder)."""
    higgs_dir = Path(higgs_dir)
    for spec in HIGGS_SPECS:
        entry = section.get("sub_models", {}).get(spec.key)
        if entry is None:
            raise UserError(f"the codec manifest section lists no {spec.key}; rebuild the codec with optimize.py")
        path = higgs_dir / entry["filename"]
        if not path.is_file():
            raise UserError(f"codec folder {higgs_dir} is missing {entry['filename']}; re-copy or rebuild it")


class HiggsCodec:
    """The four codec graphs of one build (why four: docs/DESIGN.md §codec-graphs)."""

    def __init__(self, higgs_dir, section: dict, providers=None, threads: int | None = None):
        self.higgs_dir = Path(higgs_dir)
        self.section = section
        self.sample_rate = int(section["sample_rate"])
        self.hop_length = int(section["hop_length"])
        self.num_codebooks = int(section["num_codebooks"])
        self.codebook_size = int(section["codebook_size"])
        self._sessions = {}
        check_files(self.higgs_dir, section)
        self._providers, self._threads = providers, threads

    def session(self, key: str):
        """Graphs load on first use: speaking needs only the decoder (the fp16 encoders hold ~700 MB)."""
        if key not in self._sessions:
            path = self.higgs_dir / self.section["sub_models"][key]["filename"]
            # the decoder speaks every utterance; the encoders run once a clip, not worth a widened copy
            ours = (key == HIGGS_DECODER.key and native_kernels.why_not_here() is None
                    and (self._providers or ["CPUExecutionProvider"])[0] == "CPUExecutionProvider")
            graph = kernel_graphs.codec_graph(path) if ours else None
            self._sessions[key] = open_with_kernels(path, self._providers, self._threads, graph=graph)
        return self._sessions[key]

    def load_decoder(self) -> None:
        """Load the decoder ahead of time (so its load is not counted in a timed synthesis)."""
        self.session(HIGGS_DECODER.key)

    # --- encoding ----------------------------------------------------------------

    def prepare(self, waveform, sample_rate: int) -> np.ndarray:
        """Mono float32 at the codec rate, cut to whole hops: what the encoders take."""
        import soxr

        wav = np.asarray(waveform)
        if wav.dtype.kind != "f":
            raise UserError(f"a waveform must hold floats in [-1, 1], got dtype {wav.dtype}")
        wav = to_mono(wav)
        if not np.isfinite(wav).all():
            raise UserError("the waveform holds NaN or infinite samples")
        if not isinstance(sample_rate, (int, np.integer)) or sample_rate <= 0:
            raise UserError(f"sample rate must be a positive integer, got {sample_rate!r}")
        if sample_rate != self.sample_rate and len(wav):
            wav = soxr.resample(wav, int(sample_rate), self.sample_rate).astype(np.float32, copy=False)
        seconds = len(wav) / self.sample_rate
        wav = cut_to_hops(wav, self.hop_length)
        if len(wav) == 0:
            raise UserError(
                f"audio is {seconds:.3f} s long; the codec needs at least one "
                f"{self.hop_length}-sample hop ({self.hop_length / self.sample_rate:.2f} s at {self.sample_rate} Hz)"
            )
        return np.ascontiguousarray(wav)

    def encode_prepared(self, waveforms: np.ndarray) -> np.ndarray:
        """Codes [B, 8, T] int64 for waveforms [B, T * hop] already at the codec rate."""
        batch = waveforms[:, None, :].astype(np.float32, copy=False)
        acoustic = self.session(ACOUSTIC_ENCODER.key).run(None, {ACOUSTIC_ENCODER.inputs[0].name: batch})[0]
        semantic = self.session(SEMANTIC_ENCODER.key).run(None, {SEMANTIC_ENCODER.inputs[0].name: batch})[0]
        feeds = {QUANTIZER_ENCODER.inputs[0].name: acoustic.astype(np.float32, copy=False),
                 QUANTIZER_ENCODER.inputs[1].name: semantic.astype(np.float32, copy=False)}
        return self.session(QUANTIZER_ENCODER.key).run(None, feeds)[0].astype(np.int64, copy=False)

    def encode(self, waveform, sample_rate: int) -> np.ndarray:
        """Codes [8, T] int64 for one clip of any length (>= one hop), rate and channel count."""
        return self.encode_prepared(self.prepare(waveform, sample_rate)[None])[0]

    def encode_batch(self, waveforms, sample_rates) -> list[np.ndarray]:
        """Codes [8, T_i] per clip. Clips of equal length after preparation share one run;
        others run apart, since padding would change what HuBERT's attention sees."""
        if isinstance(sample_rates, (int, np.integer)):
            sample_rates = [sample_rates] * len(waveforms)
        if len(sample_rates) != len(waveforms):
            raise UserError(f"{len(waveforms)} waveforms but {len(sample_rates)} sample rates")
        prepared = [self.prepare(w, sr) for w, sr in zip(waveforms, sample_rates)]
        codes: list[np.ndarray | None] = [None] * len(prepared)
        for length in dict.fromkeys(len(w) for w in prepared):
            members = [i for i, w in enumerate(prepared) if len(w) == length]
            batch_codes = self.encode_prepared(np.stack([prepared[i] for i in members]))
            for i, clip_codes in zip(members, batch_codes):
                codes[i] = clip_codes
        return codes

    # --- decoding ----------------------------------------------------------------

    def check_codes(self, codes) -> np.ndarray:
        """Codes as int64 [B, 8, T]; [8, T] is taken as one clip."""
        given = np.asarray(codes)
        if given.dtype.kind not in "iu":
            raise UserError(f"codes must be integers, got dtype {given.dtype}")
        codes = given[None] if given.ndim == 2 else given
        if codes.ndim != 3 or codes.shape[1] != self.num_codebooks or codes.shape[2] == 0 or codes.shape[0] == 0:
            raise UserError(
                f"codes must have shape [{self.num_codebooks}, frames] or [batch, {self.num_codebooks}, frames] "
                f"with frames >= 1, got {list(given.shape)}"
            )
        low, high = int(codes.min()), int(codes.max())
        if low < 0 or high >= self.codebook_size:
            raise UserError(f"codes must lie in 0..{self.codebook_size - 1}, found values from {low} to {high}")
        return codes.astype(np.int64, copy=False)

    def decode(self, codes) -> np.ndarray:
        """Waveform at 24 kHz, float32: [T * 960] for codes [8, T], [B, T * 960] for [B, 8, T]."""
        single = np.asarray(codes).ndim == 2
        batch = self.check_codes(codes)
        audio = self.session(HIGGS_DECODER.key).run(None, {HIGGS_DECODER.inputs[0].name: batch})[0]
        audio = audio[:, 0, :].astype(np.float32, copy=False)
        return audio[0] if single else audio

    def decode_batch(self, codes_list) -> list[np.ndarray]:
        """One waveform per [8, T_i]; equal lengths share one run (the decoder's receptive
        field would carry padding into the tail of shorter clips)."""
        checked = [self.check_codes(c)[0] if np.asarray(c).ndim == 2 else None for c in codes_list]
        if any(c is None for c in checked):
            raise UserError("decode_batch takes a list of [8, frames] code arrays")
        audio: list[np.ndarray | None] = [None] * len(checked)
        for frames in dict.fromkeys(c.shape[1] for c in checked):
            members = [i for i, c in enumerate(checked) if c.shape[1] == frames]
            decoded = self.decode(np.stack([checked[i] for i in members]))
            for i, wav in zip(members, decoded):
                audio[i] = wav
        return audio
