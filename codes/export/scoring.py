"""The decoding step's maths as a torch module, exported as the cell-scoring graphs.

It mirrors codes/runtime/model/decoding.py (the numpy reference, itself checked against upstream
function by function): guided log-probs, a token per cell, a score per cell. The host keeps
the schedule and the top-k reveal. Every setting is a per-item input, so a branch on a
setting is a `where`, never Python control flow the exporter would freeze.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from codes.runtime.contract.specs import AUDIO_MASK_ID, AUDIO_VOCAB_SIZE, NUM_CODEBOOKS
from codes.runtime.model.decoding import GUMBEL_EPS, TOP_K_RATIO


def _per_item(setting: torch.Tensor) -> torch.Tensor:
    """[N] -> [N, 1, 1], to broadcast over [N, 8, T]."""
    return setting[:, None, None]


def _gumbel(uniform: torch.Tensor) -> torch.Tensor:
    return -torch.log(-torch.log(uniform + float(GUMBEL_EPS)) + float(GUMBEL_EPS))


class CellScoring(nn.Module):
    """Target logits of both CFG rows -> (token, score) per cell; `sampled` adds Gumbel class sampling."""

    sampled = False

    @classmethod
    def load(cls, source=None) -> nn.Module:
        return cls().eval()

    @classmethod
    def example_inputs(cls, source=None, items: int = 2, target: int = 3) -> tuple:
        generator = torch.Generator().manual_seed(0)
        logits = torch.randn(2 * items, NUM_CODEBOOKS, target, AUDIO_VOCAB_SIZE, generator=generator)
        settings = (torch.tensor([2.0, 0.0]), torch.tensor([5.0, 1.0]), torch.tensor([5.0, 0.0]))
        inputs = (logits, torch.rand(items, NUM_CODEBOOKS, target, generator=generator), *settings)
        if cls.sampled:
            inputs += (torch.rand(items, NUM_CODEBOOKS, target, AUDIO_VOCAB_SIZE, generator=generator),
                       torch.tensor([0.8, 0.0]))
        return inputs

    def forward(self, logits, position_uniform, guidance_scale, layer_penalty_factor, position_temperature,
                class_uniform=None, class_temperature=None):
        items = guidance_scale.shape[0]
        cond = torch.log_softmax(logits[:items], dim=-1)
        uncond = torch.log_softmax(logits[items:], dim=-1)
        guidance = guidance_scale[:, None, None, None]
        guided = torch.log_softmax(cond + guidance * (cond - uncond), dim=-1)
        log_probs = torch.where(guidance != 0, guided, cond)  # guidance 0: the conditional row alone
        is_mask = torch.arange(AUDIO_VOCAB_SIZE) == AUDIO_MASK_ID
        log_probs = log_probs.masked_fill(is_mask, float("-inf"))

        tokens = log_probs.argmax(dim=-1)
        if self.sampled:
            keep = math.ceil(TOP_K_RATIO * AUDIO_VOCAB_SIZE)
            cutoff = torch.topk(log_probs, keep, dim=-1).values[..., keep - 1 : keep]
            candidates = torch.where(log_probs >= cutoff, log_probs, torch.full_like(log_probs, float("-inf")))
            temperature = class_temperature[:, None, None, None]
            safe = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
            sampled = (candidates / safe + _gumbel(class_uniform)).argmax(dim=-1)
            tokens = torch.where(_per_item(class_temperature) > 0, sampled, tokens)

        confidence = log_probs.max(dim=-1).values
        codebook_index = torch.arange(NUM_CODEBOOKS, dtype=torch.float32)[None, :, None]
        scores = confidence - codebook_index * _per_item(layer_penalty_factor)
        temperature = _per_item(position_temperature)
        safe = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
        scores = torch.where(temperature > 0, scores / safe + _gumbel(position_uniform), scores)
        return tokens, scores


class SampledCellScoring(CellScoring):
    sampled = True
