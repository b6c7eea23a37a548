"""Random Higgs Audio V2 codec checkpoints for tests and benchmarks (no downloads).

`write_higgs_checkpoint` writes an `audio_tokenizer/`-style folder (config.json,
model.safetensors, preprocessor_config.json) that loads exactly as upstream loads
`<ckpt>/audio_tokenizer`: `HiggsAudioV2TokenizerModel.from_pretrained(dir)` and
`AutoFeatureExtractor.from_pretrained(dir)`.

A freshly initialised codec is useless for parity tests: codebooks start at zero
(every code is 0) and the DAC init shrinks activations to ~1e-6. So the weights are
re-randomised from a seed: variance-preserving convolutions, spread Snake alphas,
residual VQ stages whose projections are orthonormal (each stage really removes part
of the residual) and whose codebooks are drawn from the statistics of that stage's
residual on a speech-like calibration signal. Codes then vary with the input and the
decoder's output has speech-level magnitude.

`speech_like_signal` (numpy only) is the calibration signal, and the test signal of
the codec equivalence check and the tests.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

SAMPLE_RATE = 24000
HOP_LENGTH = 960
CODEBOOK_SIZE = 1024
TARGET_BANDWIDTHS = [0.5, 1, 1.5, 2]  # 0.25 kbps per codebook at 25 fps: 8 codebooks

# Shapes per size. "full" is the released tokenizer's layout (DAC 64/1024/256 with
# strides 8,5,4,2,3, HuBERT-base semantic model, 64-d codebooks): ~201 M parameters.
SIZES = {
    "tiny": {
        "codebook_dim": 8,
        "dac": {"encoder_hidden_size": 4, "decoder_hidden_size": 64, "hidden_size": 16},
        "hubert": {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 64,
            "conv_dim": (16,) * 7,
            "num_conv_pos_embeddings": 16,
            "num_conv_pos_embedding_groups": 4,
        },
    },
    "full": {
        "codebook_dim": 64,
        "dac": {"encoder_hidden_size": 64, "decoder_hidden_size": 1024, "hidden_size": 256},
        "hubert": {},  # HubertConfig() defaults are HuBERT-base
    },
}

# RMS the decoder output is scaled to: a normal speech level, far from clipping.
DECODER_OUTPUT_RMS = 0.1


def speech_like_signal(seconds: float, sample_rate: int = SAMPLE_RATE, seed: int = 0) -> np.ndarray:
    """A mono float32 waveform that moves like speech: voiced harmonic stretches with
    vibrato and a wandering formant envelope, unvoiced noise bursts, and short pauses."""
    rng = np.random.default_rng(seed)
    n = int(round(seconds * sample_rate))
    t = np.arange(n) / sample_rate
    out = np.zeros(n, dtype=np.float64)
    pos = 0
    while pos < n:
        seg = int(sample_rate * rng.uniform(0.08, 0.3))
        end = min(n, pos + seg)
        tt = t[pos:end] - t[pos]
        kind = rng.uniform()
        if kind < 0.65:  # voiced: harmonics of a gliding f0 with vibrato, two formant bumps
            f0 = rng.uniform(90, 260) * (1 + 0.15 * np.sin(2 * np.pi * rng.uniform(0.5, 2) * tt))
            f0 *= 1 + 0.02 * np.sin(2 * np.pi * rng.uniform(4, 7) * tt)
            phase = 2 * np.pi * np.cumsum(f0) / sample_rate
            formants = rng.uniform([300, 900], [900, 2500])
            voiced = np.zeros_like(tt)
            for h in range(1, 30):
                fh = h * f0.mean()
                if fh > sample_rate / 2 - 500:
                    break
                gain = sum(np.exp(-(((fh - f) / 250.0) ** 2)) for f in formants) + 0.05
                voiced += gain / h**0.5 * np.sin(h * phase)
            env = np.sin(np.pi * np.linspace(0, 1, end - pos)) ** 0.5
            out[pos:end] = 0.15 * voiced * env
        elif kind < 0.9:  # unvoiced: noise burst, crudely high-passed
            noise = rng.standard_normal(end - pos)
            noise = np.diff(noise, prepend=0.0)
            env = np.exp(-np.linspace(0, rng.uniform(1, 5), end - pos))
            out[pos:end] = 0.05 * noise * env
        # else: a pause (silence with a little room noise below)
        pos = end
    out += 1e-3 * rng.standard_normal(n)
    return out.astype(np.float32)


def higgs_config(size: str = "tiny"):
    """The transformers config of a 25 fps, 8 x 1024 Higgs Audio V2 codec of the given size."""
    from transformers import DacConfig, HiggsAudioV2TokenizerConfig, HubertConfig

    if size not in SIZES:
        raise ValueError(f"unknown codec size {size!r}; use one of {sorted(SIZES)}")
    shape = SIZES[size]
    # DacConfig derives upsampling_ratios and hidden_size in __post_init__; passing them
    # explicitly keeps the Higgs layout (decoder strides in the same order as the encoder's).
    dac = DacConfig(
        downsampling_ratios=[8, 5, 4, 2, 3],
        upsampling_ratios=[8, 5, 4, 2, 3],
        sampling_rate=SAMPLE_RATE,
        **shape["dac"],
    )
    hubert = HubertConfig(mask_time_prob=0.0, **shape["hubert"])
    return HiggsAudioV2TokenizerConfig(
        acoustic_model_config=dac.to_dict(),
        semantic_model_config=hubert.to_dict(),
        codebook_size=CODEBOOK_SIZE,
        codebook_dim=shape["codebook_dim"],
        target_bandwidths=TARGET_BANDWIDTHS,
        sample_rate=SAMPLE_RATE,
        semantic_sample_rate=16000,
    )


def _normalize_outputs(modules, targets, run) -> None:
    """Rescale each module's weight and bias, in forward order, so that its output on the
    calibration signal has the target standard deviation (one pass: each hook rescales
    the output it returns too, so later layers see the normalised signal)."""

    def hook(module, _inputs, output):
        scale = targets[module] / (output.std().item() + 1e-12)
        module.weight.mul_(scale)
        if module.bias is not None:
            module.bias.mul_(scale)
        return output * scale

    handles = [m.register_forward_hook(hook) for m in modules]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()


def _randomize(model, seed: int, calibration: np.ndarray) -> None:
    import torch
    from torch import nn

    gen = torch.Generator().manual_seed(seed)

    def normal_(tensor, std):
        tensor.copy_(torch.randn(tensor.shape, generator=gen) * std)

    convs = (nn.Conv1d, nn.ConvTranspose1d)
    # Activations stay near unit scale through every layer (a random DAC otherwise grows
    # ~3x per block, and fp32 rounding then shows up as ~1e-4 output differences).
    # Residual branches add at half scale; the decoder ends at speech level.
    targets = {}
    for part in (model.acoustic_encoder, model.acoustic_decoder, model.encoder_semantic):
        for name, module in part.named_modules():
            if isinstance(module, convs):
                targets[module] = 0.5 if ".res_unit" in name and name.endswith("conv2") else 1.0
    targets[model.acoustic_decoder.conv2] = DECODER_OUTPUT_RMS
    targets[model.fc] = 1.0

    with torch.no_grad():
        for module in list(targets) + [model.fc2]:
            fan_in = module.weight[0].numel() if isinstance(module, (nn.Conv1d, nn.Linear)) else (
                module.weight.shape[0] * module.weight.shape[2] / module.stride[0])
            normal_(module.weight, 1.0 / fan_in**0.5)
            if module.bias is not None:
                normal_(module.bias, 0.02)
        for part in (model.acoustic_encoder, model.acoustic_decoder):
            for module in part.modules():
                if module.__class__.__name__ == "Snake1d":
                    module.alpha.copy_(0.5 + 1.5 * torch.rand(module.alpha.shape, generator=gen))

        waveform = torch.from_numpy(calibration)[None, None, :]
        waveform = waveform[..., : waveform.shape[-1] // HOP_LENGTH * HOP_LENGTH]
        decoder_ids = {id(m) for m in model.acoustic_decoder.modules()}
        encoder_side = [m for m in targets if id(m) not in decoder_ids]
        features = {}

        def encode_features():
            semantic = model._extract_semantic_features(waveform)
            e_semantic = model.encoder_semantic(semantic.transpose(1, 2))
            e_acoustic = model.acoustic_encoder(waveform)
            embeddings = torch.cat([e_acoustic, e_semantic], dim=1)
            features["embeddings"] = model.fc(embeddings.transpose(1, 2)).transpose(1, 2)

        _normalize_outputs(encoder_side, targets, encode_features)

        # Residual VQ: orthonormal project_in rows, project_out = its transpose, so that
        # subtracting a stage's quantized vector removes that stage's share of the residual.
        # Each codebook follows the statistics of its stage's projected residual.
        residual = features["embeddings"]
        for vq in model.quantizer.quantizers:
            hidden, dim = vq.project_in.weight.shape[1], vq.project_in.weight.shape[0]
            basis, _ = torch.linalg.qr(torch.randn(hidden, dim, generator=gen))
            vq.project_in.weight.copy_(basis.T)
            vq.project_in.bias.zero_()
            vq.project_out.weight.copy_(basis)
            vq.project_out.bias.zero_()
            projected = vq.project_in(residual.permute(0, 2, 1)).reshape(-1, dim)
            mean, std = projected.mean(0), projected.std(0) + 1e-6
            embed = mean + std * torch.randn(CODEBOOK_SIZE, dim, generator=gen)
            book = vq.codebook
            book.embed.copy_(embed)
            book.embed_avg.copy_(embed)
            book.cluster_size.fill_(1.0)
            book.inited.fill_(True)
            residual = residual - vq.decode(vq.encode(residual))

        codes = model.encode(waveform, return_dict=False)
        decoder_side = [m for m in targets if id(m) in decoder_ids]
        _normalize_outputs(decoder_side, targets, lambda: model.decode(codes, return_dict=False))


def write_higgs_checkpoint(out_dir, size: str = "tiny", seed: int = 0) -> Path:
    """Write a seeded random codec of `size` ("tiny" or "full") into `out_dir`; return it."""
    import torch
    from transformers import DacFeatureExtractor, HiggsAudioV2TokenizerModel

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    config = higgs_config(size)
    torch.manual_seed(seed)  # the constructor's own init draws from the global generator
    model = HiggsAudioV2TokenizerModel(config).eval()
    calibration_seconds = 4.0 if size == "tiny" else 1.0
    _randomize(model, seed, speech_like_signal(calibration_seconds, seed=seed + 1))
    model.save_pretrained(out_dir)
    DacFeatureExtractor(feature_size=1, sampling_rate=SAMPLE_RATE, hop_length=HOP_LENGTH).save_pretrained(out_dir)
    return out_dir
