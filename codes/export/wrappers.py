"""Torch modules whose forward is exactly one ONNX sub-model (specs in codes/specs.py)."""

from __future__ import annotations

import torch
from torch import nn

from codes.runtime.specs import AUDIO_VOCAB_SIZE, NUM_CODEBOOKS


class AudioEmbeddingsEncoder(nn.Module):
    """input_ids [B,8,S] + audio_mask [B,S] -> inputs_embeds [B,S,H], upstream's own embedding code."""

    def __init__(self, omnivoice):
        super().__init__()
        self.omnivoice = omnivoice

    def forward(self, input_ids, audio_mask):
        return self.omnivoice._prepare_embed_inputs(input_ids, audio_mask)


class LlmBackbone(nn.Module):
    """inputs_embeds + 4-D bool mask -> last hidden state, bidirectional (no causal mask is added)."""

    def __init__(self, omnivoice):
        super().__init__()
        self.llm = omnivoice.llm

    def forward(self, inputs_embeds, attention_mask):
        out = self.llm(inputs_embeds=inputs_embeds, attention_mask=attention_mask, use_cache=False)
        return out.last_hidden_state


class AudioHeadsDecoder(nn.Module):
    """hidden_states [B,S,H] -> logits [B,8,S,1025], the layout upstream's forward returns."""

    def __init__(self, omnivoice):
        super().__init__()
        self.audio_heads = omnivoice.audio_heads

    def forward(self, hidden_states):
        batch, seq, _ = hidden_states.shape
        logits = self.audio_heads(hidden_states)
        return logits.view(batch, seq, NUM_CODEBOOKS, AUDIO_VOCAB_SIZE).permute(0, 2, 1, 3)


WRAPPERS = {
    "audio_embeddings_encoder": AudioEmbeddingsEncoder,
    "llm_decoder": LlmBackbone,
    "audio_heads_decoder": AudioHeadsDecoder,
}


def wrap(key: str, omnivoice) -> nn.Module:
    # .eval() on the wrapper: the legacy exporter restores the wrapper's training flag onto children.
    return WRAPPERS[key](omnivoice).eval()


def dummy_inputs(key: str, hidden_size: int, batch: int = 2, seq: int = 6):
    """Export-time example inputs; a padded CFG-like batch so no axis is traced as constant."""
    generator = torch.Generator().manual_seed(0)
    if key == "audio_embeddings_encoder":
        input_ids = torch.randint(0, AUDIO_VOCAB_SIZE, (batch, NUM_CODEBOOKS, seq), generator=generator)
        audio_mask = torch.zeros(batch, seq, dtype=torch.bool)
        audio_mask[:, seq // 2 :] = True
        return (input_ids, audio_mask)
    if key == "llm_decoder":
        mask = torch.ones(batch, 1, seq, seq, dtype=torch.bool)
        mask[-1, :, :, seq - 2 :] = False
        mask[-1, :, seq - 2 :, :] = False
        mask[-1, :, torch.arange(seq - 2, seq), torch.arange(seq - 2, seq)] = True
        return (torch.randn(batch, seq, hidden_size, generator=generator), mask)
    if key == "audio_heads_decoder":
        return (torch.randn(batch, seq, hidden_size, generator=generator),)
    raise KeyError(key)
