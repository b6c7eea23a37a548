"""Torch modules whose forward is exactly one backbone graph (specs in codes/runtime/contract/specs.py)."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from codes.export.checkpoint import load_omnivoice
from codes.runtime.contract.specs import AUDIO_VOCAB_SIZE, NUM_CODEBOOKS


def hidden_size(checkpoint: Path) -> int:
    """The backbone's width from config.json, without loading weights."""
    return json.loads((Path(checkpoint) / "config.json").read_text())["llm_config"]["hidden_size"]


class OmniVoiceGraph(nn.Module):
    """A graph cut out of upstream's OmniVoice; `example(hidden)` gives export-time inputs, a padded
    CFG-like batch (batch 2, 6 positions) so no axis is traced as a constant."""

    @classmethod
    def load(cls, checkpoint: Path) -> nn.Module:
        # .eval() on the wrapper: the legacy exporter restores the wrapper's training flag onto children.
        return cls(load_omnivoice(Path(checkpoint))).eval()

    @classmethod
    def example_inputs(cls, checkpoint: Path) -> tuple:
        return cls.example(hidden_size(checkpoint))


class AudioEmbeddingsEncoder(OmniVoiceGraph):
    """input_ids [B,8,S] + audio_mask [B,S] -> inputs_embeds [B,S,H], upstream's own embedding code."""

    def __init__(self, omnivoice):
        super().__init__()
        self.omnivoice = omnivoice

    def forward(self, input_ids, audio_mask):
        return self.omnivoice._prepare_embed_inputs(input_ids, audio_mask)

    @staticmethod
    def example(hidden: int, batch: int = 2, seq: int = 6) -> tuple:
        input_ids = torch.randint(0, AUDIO_VOCAB_SIZE, (batch, NUM_CODEBOOKS, seq), generator=_generator())
        audio_mask = torch.zeros(batch, seq, dtype=torch.bool)
        audio_mask[:, seq // 2 :] = True
        return (input_ids, audio_mask)


class LlmBackbone(OmniVoiceGraph):
    """inputs_embeds + 4-D bool mask -> last hidden state, bidirectional (no causal mask is added)."""

    def __init__(self, omnivoice):
        super().__init__()
        self.llm = omnivoice.llm

    def forward(self, inputs_embeds, attention_mask):
        out = self.llm(inputs_embeds=inputs_embeds, attention_mask=attention_mask, use_cache=False)
        return out.last_hidden_state

    @staticmethod
    def example(hidden: int, batch: int = 2, seq: int = 6) -> tuple:
        mask = torch.ones(batch, 1, seq, seq, dtype=torch.bool)
        mask[-1, :, :, seq - 2 :] = False  # the last row is padded: its padding attends only to itself
        mask[-1, :, seq - 2 :, :] = False
        mask[-1, :, torch.arange(seq - 2, seq), torch.arange(seq - 2, seq)] = True
        return (torch.randn(batch, seq, hidden, generator=_generator()), mask)


class AudioHeadsDecoder(OmniVoiceGraph):
    """hidden_states [B,S,H] -> logits [B,8,S,1025], the layout upstream's forward returns."""

    def __init__(self, omnivoice):
        super().__init__()
        self.audio_heads = omnivoice.audio_heads

    def forward(self, hidden_states):
        batch, seq, _ = hidden_states.shape
        logits = self.audio_heads(hidden_states)
        return logits.view(batch, seq, NUM_CODEBOOKS, AUDIO_VOCAB_SIZE).permute(0, 2, 1, 3)

    @staticmethod
    def example(hidden: int, batch: int = 2, seq: int = 6) -> tuple:
        return (torch.randn(batch, seq, hidden, generator=_generator()),)


def _generator() -> torch.Generator:
    return torch.Generator().manual_seed(0)
