"""The bidirectionality probe: does changing only the last position move earlier hidden states?

A causal backbone (the genai builder's default) leaves them exactly unchanged, and
iterative unmasking on it collapses into noise; OmniVoice's backbone must not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

# A causal graph gives exactly 0; a bidirectional one moves earlier positions by O(1e-2) or more.
RELATIVE_THRESHOLD = 1e-5
# What a user with a causal backbone can do (the genai builder's graph, as published, is causal).
CAUSAL_ADVICE = ("OmniVoice's iterative unmasking collapses into noise on it: build a bidirectional backbone "
                 "with optimize.py, or drop in a bidirectional re-export and pass it with --backbone FILE")


class Backbone(Protocol):
    """What the probe calls: the runtime's BackboneRunner or the checks' GenaiBackboneRunner."""

    hidden_size: int
    signature: str

    def __call__(self, inputs_embeds: np.ndarray, attention_mask: np.ndarray) -> np.ndarray: ...


@dataclass
class ProbeResult:
    bidirectional: bool
    max_change_before_last: float
    hidden_scale: float
    signature: str

    def describe(self) -> str:
        kind = "bidirectional" if self.bidirectional else "CAUSAL"
        text = (f"{kind}: changing only the last position moved earlier hidden states by "
                f"{self.max_change_before_last:.3g} (hidden scale {self.hidden_scale:.3g}, signature {self.signature})")
        if not self.bidirectional:
            text += f"; {CAUSAL_ADVICE}"
        return text


def probe_bidirectional(runner: Backbone, sequence: int = 8, seed: int = 0) -> ProbeResult:
    rng = np.random.default_rng(seed)
    embeds = rng.standard_normal((1, sequence, runner.hidden_size)).astype(np.float32)
    mask = np.ones((1, 1, sequence, sequence), dtype=bool)
    before = runner(embeds, mask)
    changed = embeds.copy()
    changed[:, -1] = rng.standard_normal(runner.hidden_size)
    after = runner(changed, mask)
    change = float(np.abs(after[:, :-1] - before[:, :-1]).max())
    scale = float(np.abs(before).max()) or 1.0
    return ProbeResult(change > RELATIVE_THRESHOLD * scale, change, scale, runner.signature)
