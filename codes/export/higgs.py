"""The Higgs Audio V2 codec as four ONNX graphs (build time: needs torch and transformers).

Upstream's `encode` cannot be one graph: the 24->16 kHz resampler's output length and
the "pad the acoustic input?" decision are Python-side length arithmetic, which a
traced export bakes in (docs/DESIGN.md §codec-graphs). Split at the feature boundary instead:

  acoustic_encoder   waveform 24 kHz [B,1,N]          -> DAC features [B,A,T]
  semantic_encoder   waveform 24 kHz [B,1,N]          -> semantic features [B,S,T]
                     (24->16 kHz resampling, HuBERT, layer mean, every 2nd frame,
                      semantic conv encoder: all inside the graph)
  quantizer_encoder  acoustic + semantic features     -> codes [B,8,T] int64
  higgs_decoder      codes [B,8,T]                    -> waveform 24 kHz [B,1,960*T]

The encoders take whole hops (N = 960*T), as upstream feeds them after cutting the
reference to a multiple of the hop; then the acoustic and semantic frame counts agree
and upstream never takes its padding branch, so the graphs need none.

The resampler lives in the semantic graph: it is torchaudio's windowed-sinc filter as a
fixed strided convolution, so the ONNX graph reproduces upstream's 16 kHz signal to
float rounding. Resampling in the runtime (soxr) would feed HuBERT a differently
filtered signal and codes would no longer match upstream's exactly; and the runtime
keeps one input rate for all encoders.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import torch
from torch import nn

from codes.runtime.contract.specs import CODEBOOK_SIZE, HOP_LENGTH, NUM_CODEBOOKS, SAMPLE_RATE

SEMANTIC_SAMPLE_RATE = 16000
# Upstream pads the 16 kHz signal by 160 samples per side before HuBERT (not hop/2).
SEMANTIC_PAD = 160


# --- preparation ---------------------------------------------------------------------


def _remove_weight_norms(model: nn.Module) -> None:
    """Fold weight-norm (parametrizations and old-style hooks) into plain weights."""
    from torch.nn.utils import parametrize

    for module in model.modules():
        if parametrize.is_parametrized(module):
            for name in list(module.parametrizations.keys()):
                parametrize.remove_parametrizations(module, name, leave_parametrized=True)
        if hasattr(module, "weight_g") and hasattr(module, "weight_v"):
            torch.nn.utils.remove_weight_norm(module)


@lru_cache(maxsize=2)
def load_prepared_higgs(source_dir: str):
    """The upstream codec from `<ckpt>/audio_tokenizer`, in eval mode, weight norms folded
    (HuBERT's pos_conv_embed included), gradients off."""
    from transformers import HiggsAudioV2TokenizerModel

    model = HiggsAudioV2TokenizerModel.from_pretrained(source_dir).eval()
    _remove_weight_norms(model)
    for param in model.parameters():
        param.requires_grad_(False)
    config = model.config
    if (config.hop_length, config.frame_rate, config.num_quantizers, config.codebook_size) != (
        HOP_LENGTH, SAMPLE_RATE // HOP_LENGTH, NUM_CODEBOOKS, CODEBOOK_SIZE
    ):
        raise ValueError(
            f"{source_dir}: codec has hop {config.hop_length}, {config.num_quantizers} codebooks of "
            f"{config.codebook_size}; OmniVoice needs hop {HOP_LENGTH}, {NUM_CODEBOOKS} x {CODEBOOK_SIZE}"
        )
    if (config.sample_rate, config.semantic_sample_rate) != (SAMPLE_RATE, SEMANTIC_SAMPLE_RATE):
        raise ValueError(f"{source_dir}: codec runs at {config.sample_rate}/{config.semantic_sample_rate} Hz; "
                         f"expected {SAMPLE_RATE}/{SEMANTIC_SAMPLE_RATE}")
    return model


# --- the four graphs -----------------------------------------------------------------


def _whole_hops(waveform):
    """The waveform viewed through [B, frames, hop]: every later length becomes linear in
    `frames` for shape inference (nested floor() lengths cost the fp16 pass's symbolic
    shape inference ~10 s per graph), and a partial hop fails loudly instead of silently."""
    batch = waveform.shape[0]
    frames = waveform.shape[-1] // HOP_LENGTH
    return waveform.reshape(batch, frames, HOP_LENGTH).reshape(batch, 1, frames * HOP_LENGTH)


class CodecGraph(nn.Module):
    """A graph cut out of upstream's codec, loaded from `<ckpt>/audio_tokenizer`; `example_inputs`
    gives export-time inputs with batch and frames > 1, so no axis is specialised to 1."""

    @classmethod
    def load(cls, source_dir) -> nn.Module:
        # The legacy exporter copies the wrapper's training flag onto its children: eval() it.
        return cls(load_prepared_higgs(str(Path(source_dir).resolve()))).eval()

    @classmethod
    def example_inputs(cls, source_dir, batch: int = 2, frames: int = 3) -> tuple:
        return (0.1 * torch.randn(batch, 1, frames * HOP_LENGTH, generator=_generator()),)


class AcousticEncoder(CodecGraph):
    def __init__(self, codec):
        super().__init__()
        self.encoder = codec.acoustic_encoder

    def forward(self, waveform):
        return self.encoder(_whole_hops(waveform))


class SincResampler(nn.Module):
    """torchaudio's sinc resampler (its own kernel, from `transforms.Resample`) for inputs
    whose length is a multiple of the rate ratio's numerator (3 for 24->16 kHz; whole
    hops always are).

    torchaudio pads (width, width + orig), convolves, then trims to ceil(N * new / orig)
    with Python arithmetic on the traced length. For such lengths a right pad of `width`
    yields exactly the kept samples, so the graph needs no length arithmetic at all (a
    symbolic trim also costs the fp16 pass's sympy shape inference ~15 s)."""

    def __init__(self, orig_freq: int, new_freq: int):
        super().__init__()
        import torchaudio

        reference = torchaudio.transforms.Resample(orig_freq, new_freq)
        self.register_buffer("kernel", reference.kernel.clone(), persistent=False)
        self.width = int(reference.width)
        self.orig = int(reference.orig_freq) // int(reference.gcd)

    def forward(self, waveform):  # [B, N] -> [B, N * new / orig]
        padded = nn.functional.pad(waveform, (self.width, self.width))
        resampled = nn.functional.conv1d(padded[:, None], self.kernel, stride=self.orig)
        return resampled.transpose(1, 2).reshape(waveform.shape[0], -1)


class SemanticEncoder(CodecGraph):
    def __init__(self, codec):
        super().__init__()
        config = codec.config
        self.resample = SincResampler(config.sample_rate, config.semantic_sample_rate)
        self.hubert = codec.semantic_model
        self.downsample = config.semantic_downsample_factor
        self.encoder = codec.encoder_semantic

    def forward(self, waveform):
        audio_16k = self.resample(_whole_hops(waveform)[:, 0, :])
        audio_16k = nn.functional.pad(audio_16k, (SEMANTIC_PAD, SEMANTIC_PAD))
        hidden_states = self.hubert(audio_16k, output_hidden_states=True).hidden_states
        features = torch.stack(hidden_states, dim=1).mean(dim=1)
        if self.downsample > 1:
            features = features[:, :: self.downsample, :]
        return self.encoder(features.transpose(1, 2))


class QuantizerEncoder(CodecGraph):
    @classmethod
    def example_inputs(cls, source_dir, batch: int = 2, frames: int = 3) -> tuple:
        acoustic_dim, semantic_dim = feature_dims(source_dir)
        gen = _generator()
        return (torch.randn(batch, acoustic_dim, frames, generator=gen),
                torch.randn(batch, semantic_dim, frames, generator=gen))

    def __init__(self, codec):
        super().__init__()
        self.fc = codec.fc
        self.quantizer = codec.quantizer

    def forward(self, acoustic_features, semantic_features):
        embeddings = torch.cat([acoustic_features, semantic_features], dim=1)
        embeddings = self.fc(embeddings.transpose(1, 2)).transpose(1, 2)
        return self.quantizer.encode(embeddings).transpose(0, 1)


class HiggsDecoder(CodecGraph):
    @classmethod
    def example_inputs(cls, source_dir, batch: int = 2, frames: int = 3) -> tuple:
        return (torch.randint(0, CODEBOOK_SIZE, (batch, NUM_CODEBOOKS, frames), generator=_generator()),)

    def __init__(self, codec):
        super().__init__()
        self.quantizer = codec.quantizer
        self.fc2 = codec.fc2
        self.decoder = codec.acoustic_decoder

    def forward(self, audio_codes):
        quantized = self.quantizer.decode(audio_codes.transpose(0, 1))
        return self.decoder(self.fc2(quantized.transpose(1, 2)).transpose(1, 2))


def feature_dims(source_dir) -> tuple[int, int]:
    """(acoustic_dim, semantic_dim) from config.json, without loading weights."""
    config = json.loads((Path(source_dir) / "config.json").read_text())
    return config["acoustic_model_config"]["hidden_size"], config["semantic_model_config"]["hidden_size"]


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)
