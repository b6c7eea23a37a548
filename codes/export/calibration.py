"""Calibration for int8: the model's own activations over a fixed prompt set.

Every linear layer's input is recorded as its per-channel max |x|, at four sites a layer: the
inputs of q/k/v, of o, of gate/up and of down. The int8 scheme (codes/export/int8.py) keeps the
few channels that dwarf the rest in fp32, the outlier channels a trained transformer carries
(LLM.int8, massive activations). The maxima come from upstream's model decoding
CALIBRATION_PROMPTS greedily (several languages, voice design, and a clone of the first prompt's
codes), over the positions that attend to something.

SmoothQuant, which the scheme can fold in first (a measured alternative, bench/quant_results.md):
for the input channel j of a linear layer, s_j = max|X_j|^alpha / max|W_j|^(1 - alpha); X_j is divided
by s_j and W's input channel j multiplied by it. The division is folded exactly into what makes X:
- q/k/v's input is input_layernorm's output: its weight is divided by s;
- gate/up's input is post_attention_layernorm's output: likewise;
- down's input is silu(gate) * up, linear in up: up_proj's output rows are divided by s.
The fp32 function is unchanged (up to rounding); only how it quantizes changes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codes.common.errors import UserError

# Not the fidelity prompts (codes/export/fidelity.py): fidelity is measured on held-out text.
CALIBRATION_PROMPTS = (  # (text, language, instruct)
    ("Please leave your message after the tone, and we will call you back tomorrow.", "en", None),
    ("春天来了，公园里的花都开了，孩子们在草地上奔跑。", "zh", "male, low pitch"),
    ("¿Podrías decirme a qué hora sale el último autobús hacia el centro?", "es", "female, high pitch"),
    ("Die Bibliothek bleibt am Wochenende wegen Renovierungsarbeiten geschlossen.", "de", None),
    ("Как пройти к ближайшей станции метро?", "ru", "female"),
    ("오늘 저녁에는 비가 올 것 같으니 우산을 챙기세요.", "ko", "male"),
)
CALIBRATION_CLONE_TEXT = "This line borrows the voice of the first message, word for word in a new sentence."
CALIBRATION_STEPS = 8
# Below this, a channel's maximum is treated as this: a channel the prompts never excite keeps its scale.
MIN_MAGNITUDE = 1e-5
SITES = ("attn", "o", "mlp", "down")  # the inputs of q/k/v, of o, of gate/up, of down
SMOOTHED_SITES = ("attn", "mlp", "down")  # where a scale folds exactly into what makes the input


def greedy_settings(num_steps: int):
    """Greedy decoding at the default guidance: a prompt set decodes the same way every time."""
    from codes.runtime.contract.settings import GenerationSettings

    return GenerationSettings(num_steps=num_steps, position_temperature=0.0, class_temperature=0.0)


def decode_prompt_set(tokenizer, prompts, clone_text: str, target_logits_fn, num_steps: int) -> None:
    """Decode `prompts` greedily through `target_logits_fn`, then `clone_text` in the voice of the first
    prompt's codes: the fixed workload that calibration and fidelity observe through their logits fn."""
    from codes.runtime.model.decoding import RandomNoise, iterative_decode
    from codes.runtime.request import Voice, settle
    from codes.runtime.voices.prompt import prompt_batch

    settings = greedy_settings(num_steps)
    texts, languages, instructs = zip(*prompts)
    requests = settle(list(texts), list(languages), list(instructs))
    batch = prompt_batch(tokenizer, requests, settings.denoise)
    lens = [r.target_len for r in requests]
    codes = iterative_decode(batch, lens, target_logits_fn, settings, RandomNoise(0))
    clone = settle([clone_text], prompts[0][1], None, Voice(codes[0], prompts[0][0], None))
    iterative_decode(prompt_batch(tokenizer, clone, settings.denoise), [clone[0].target_len], target_logits_fn,
                     settings, RandomNoise(0))


def torch_target_logits(model, before_forward=None):
    """Upstream's model as a TargetLogitsFn; `before_forward(batch)` runs ahead of each forward."""
    import torch

    def target_logits(input_ids, batch, target_lens):
        if before_forward is not None:
            before_forward(batch)
        with torch.inference_mode():
            logits = model(input_ids=torch.from_numpy(input_ids), audio_mask=torch.from_numpy(batch.audio_mask),
                           attention_mask=torch.from_numpy(batch.attention_mask)).logits.float().numpy()
        n = len(target_lens)
        return [(logits[i, :, c - t:c], logits[n + i, :, :t]) for i, (c, t) in enumerate(zip(batch.cond_lens, target_lens))]

    return target_logits


@dataclass
class Calibration:
    maxima: list[dict]  # per layer: site -> max |x| per input channel
    tokens: int  # positions observed, summed over forward passes

    def facts(self) -> dict:
        return {"prompts": len(CALIBRATION_PROMPTS) + 1, "steps": CALIBRATION_STEPS, "positions": self.tokens}

    def channel_maxima(self, node_name: str) -> np.ndarray | None:
        """The calibrated input of a backbone MatMul, by its node name (codes/export/int8.py linear_site)."""
        from codes.export.int8 import linear_site

        site = linear_site(node_name)
        if site is None or site[0] >= len(self.maxima):
            return None
        return self.maxima[site[0]][site[1]]


def _site_inputs(layer) -> dict:
    attn, mlp = layer.self_attn, layer.mlp
    return {"attn": attn.q_proj, "o": attn.o_proj, "mlp": mlp.gate_proj, "down": mlp.down_proj}


def _site_consumers(layer) -> dict:
    """Each smoothed site's linear layers (which read its input) and the weight its scales are folded into."""
    attn, mlp = layer.self_attn, layer.mlp
    return {"attn": ((attn.q_proj, attn.k_proj, attn.v_proj), layer.input_layernorm.weight),
            "mlp": ((mlp.gate_proj, mlp.up_proj), layer.post_attention_layernorm.weight),
            "down": ((mlp.down_proj,), mlp.up_proj.weight)}


def calibrate(model, tokenizer, num_steps: int = CALIBRATION_STEPS) -> Calibration:
    """Per-channel max |x| at every linear layer's input over the calibration prompt set."""
    import torch

    layers = list(model.llm.layers)
    maxima = [{site: None for site in SITES} for _ in layers]
    valid = {}
    seen = [0]

    def hook(index: int, site: str):
        def record(module, args):
            x = args[0].detach()[torch.from_numpy(valid["rows"])].float()  # [positions, channels]
            peak = x.abs().amax(0).numpy()
            held = maxima[index][site]
            maxima[index][site] = peak if held is None else np.maximum(held, peak)
        return record

    def before_forward(batch):
        # Padded positions attend to nothing: their activations are never read, so they set no scale.
        valid["rows"] = batch.attention_mask.any(axis=(1, 3))
        seen[0] += int(valid["rows"].sum())

    handles = [module.register_forward_pre_hook(hook(i, site))
               for i, layer in enumerate(layers) for site, module in _site_inputs(layer).items()]
    try:
        decode_prompt_set(tokenizer, CALIBRATION_PROMPTS, CALIBRATION_CLONE_TEXT,
                          torch_target_logits(model, before_forward), num_steps)
    finally:
        for handle in handles:
            handle.remove()
    if any(m is None for layer in maxima for m in layer.values()):
        raise UserError("calibration saw no activations at some layer; the checkpoint's model does not run the "
                        "calibration prompts (is it an OmniVoice checkpoint?)")
    return Calibration(maxima, seen[0])


def calibrate_checkpoint(source: Path) -> Calibration:
    """calibrate() on the checkpoint at `source` (upstream's model, fp32)."""
    from codes.export.checkpoint import load_omnivoice
    from codes.runtime.text.tokenizer import TextTokenizer

    return calibrate(load_omnivoice(Path(source)), TextTokenizer.from_dir(Path(source)))


def smooth_scales(activation_max: np.ndarray, weight_max: np.ndarray, alpha: float) -> np.ndarray:
    """SmoothQuant's per-input-channel scales s = max|X|^alpha / max|W|^(1 - alpha), kept finite and positive."""
    x = np.maximum(activation_max.astype(np.float64), MIN_MAGNITUDE)
    w = np.maximum(weight_max.astype(np.float64), MIN_MAGNITUDE)
    return (x**alpha / w ** (1.0 - alpha)).astype(np.float32)


def fold_smoothing(model, calibration: Calibration, alpha: float) -> Calibration:
    """Fold SmoothQuant's scales into `model`'s weights in place (module docstring): the function is unchanged.
    Returns the calibration of the smoothed model (its inputs divided by the same scales)."""
    import torch

    if not 0.0 < alpha < 1.0:
        raise UserError(f"SmoothQuant alpha must be between 0 and 1, got {alpha}")
    smoothed = []
    with torch.no_grad():
        for layer, maxima in zip(model.llm.layers, calibration.maxima):
            after = dict(maxima)
            for site, (consumers, producer) in _site_consumers(layer).items():
                weight_max = torch.cat([c.weight for c in consumers]).abs().amax(0).float().numpy()
                scales = smooth_scales(maxima[site], weight_max, alpha)
                s = torch.from_numpy(scales).to(producer.dtype)
                producer.div_(s[:, None] if site == "down" else s)  # up_proj's output rows, or a norm's weight
                for consumer in consumers:
                    consumer.weight.mul_(s[None, :])
                after[site] = maxima[site] / scales
            smoothed.append(after)
    return Calibration(smoothed, calibration.tokens)


def smoothed_checkpoint(source: Path, out_dir: Path, calibration: Calibration, alpha: float) -> tuple[Path, Calibration]:
    """The checkpoint at `source` with SmoothQuant folded in, written to `out_dir` (config and weights, what the
    exporters read); returns it and its calibration."""
    from codes.export.checkpoint import load_omnivoice

    model = load_omnivoice(Path(source))
    smoothed = fold_smoothing(model, calibration, alpha)
    model.save_pretrained(str(out_dir))
    return Path(out_dir), smoothed
