"""Iterative masked decoding in numpy: upstream's `_generate_iterative` maths, step by step.

The target starts all MASK. Each of `num_steps` steps runs the model once on the
CFG batch, then for every item: guided log-probs over the target cells, a
token per cell (argmax, or Gumbel sampling among the top 10%), a score per
cell (confidence minus a per-codebook penalty, plus Gumbel noise), and the
`reveal_count` best still-masked cells take their tokens, in both the
conditional and the unconditional row.

The model is a callable `target_logits_fn(batch_input_ids, batch) -> one
(cond [8, T, V], uncond [8, T, V]) pair per item`: only the target cells, so a
runtime may skip work the loop never reads (padding, prompt positions).
Randomness comes from a NoiseSource; draws happen in upstream's
order (per step, per item: the class draw over [8, T, 1025] when
class_temperature > 0, then the position draw over [8, T] when
position_temperature > 0), so replaying torch's `rand_like` values gives
upstream's tokens.

Ties: cells are revealed in stable descending score order (equal scores: the
lower flat index, codebook-major, wins) and the top-10% filter keeps every
value equal to the cut-off; torch.topk may order exact ties differently.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.contract.specs import AUDIO_MASK_ID
from codes.runtime.voices.prompt import CfgBatch

TargetLogits = list[tuple[np.ndarray, np.ndarray]]
TargetLogitsFn = Callable[[np.ndarray, CfgBatch, list[int]], TargetLogits]
CellScores = tuple[np.ndarray, np.ndarray]  # an item's predicted token and score per cell, [8, T] each
# (input_ids, batch, target_lens, noise per item: None where the item reveals nothing this step)
#   -> an item's CellScores, None where its noise was None
ScoreFn = Callable[[np.ndarray, CfgBatch, list[int], list], list]

TOP_K_RATIO = 0.1  # class sampling keeps this share of the vocabulary
GUMBEL_EPS = np.float32(1e-10)


class NoiseSource(Protocol):
    def uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        """float32 samples in [0, 1) of the given shape."""


class RandomNoise:
    """The default NoiseSource: one seeded numpy Generator (seed None = fresh entropy)."""

    def __init__(self, seed: int | None = None):
        self.rng = np.random.default_rng(seed)

    def uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        return self.rng.random(shape, dtype=np.float32)


def time_steps(num_steps: int, t_shift: float) -> np.ndarray:
    """The num_steps + 1 shifted times from 0 to 1 (float32), bit-equal to upstream's `_get_time_steps`.

    The schedule takes ceil() of differences of these times, so one float32 ulp
    can move a cell between steps: the grid copies torch.linspace's CPU kernel
    (step = 1/n in float32; the first half counts up from 0, the second half
    down from 1; each value rounded once, as its fused multiply-add does).
    """
    step = float(np.float32(1.0) / np.float32(num_steps))
    index = np.arange(num_steps + 1)
    counts_up = index < (num_steps + 1) // 2
    grid = np.where(counts_up, step * index, 1.0 - step * (num_steps - index)).astype(np.float32)
    shift = np.float32(t_shift)
    return shift * grid / (np.float32(1.0) + np.float32(t_shift - 1.0) * grid)


def reveal_schedule(target_len: int, num_steps: int, t_shift: float, num_codebooks: int = 8) -> list[int]:
    """How many target cells each step reveals; the counts sum to target_len * num_codebooks."""
    times = time_steps(num_steps, t_shift).tolist()
    total_cells = target_len * num_codebooks
    remaining = total_cells
    counts = []
    for step in range(num_steps):
        if step == num_steps - 1:
            reveal_count = remaining
        else:
            reveal_count = min(math.ceil(total_cells * (times[step + 1] - times[step])), remaining)
        counts.append(int(reveal_count))
        remaining -= int(reveal_count)
    return counts


def log_softmax(logits: np.ndarray) -> np.ndarray:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


def guided_log_probs(
    cond_logits: np.ndarray, uncond_logits: np.ndarray, guidance_scale: float, mask_id: int = AUDIO_MASK_ID
) -> np.ndarray:
    """Classifier-free guided log-probs over the vocabulary; MASK can never be predicted."""
    cond = log_softmax(cond_logits.astype(np.float32, copy=False))
    if guidance_scale != 0:
        uncond = log_softmax(uncond_logits.astype(np.float32, copy=False))
        log_probs = log_softmax(cond + np.float32(guidance_scale) * (cond - uncond))
    else:
        log_probs = cond
    log_probs[..., mask_id] = -np.inf
    return log_probs


def filter_top_k(log_probs: np.ndarray, ratio: float = TOP_K_RATIO) -> np.ndarray:
    """Keep the ceil(ratio * vocab) largest values of each row, the rest -inf."""
    vocab = log_probs.shape[-1]
    keep = math.ceil(ratio * vocab)
    cutoff = np.partition(log_probs, vocab - keep, axis=-1)[..., vocab - keep : vocab - keep + 1]
    return np.where(log_probs >= cutoff, log_probs, -np.inf).astype(np.float32, copy=False)


def gumbel_noise(uniform: np.ndarray) -> np.ndarray:
    """Gumbel(0, 1) samples from U[0, 1) samples, with upstream's 1e-10 guards."""
    uniform = uniform.astype(np.float32, copy=False)
    return -np.log(-np.log(uniform + GUMBEL_EPS) + GUMBEL_EPS)


def predict_tokens(log_probs: np.ndarray, class_temperature: float, noise: NoiseSource) -> np.ndarray:
    """A token per cell [8, T]: argmax, or Gumbel-max sampling among the top 10% when class_temperature > 0."""
    if class_temperature > 0:
        candidates = filter_top_k(log_probs)
        perturbed = candidates / np.float32(class_temperature) + gumbel_noise(noise.uniform(candidates.shape))
        return perturbed.argmax(axis=-1)
    return log_probs.argmax(axis=-1)


def score_cells(
    log_probs: np.ndarray, layer_penalty_factor: float, position_temperature: float, noise: NoiseSource
) -> np.ndarray:
    """How much each cell [8, T] wants to be revealed now.

    Confidence (the best log-prob) minus layer_penalty_factor per codebook
    index, so coarse codebooks go first; with position_temperature > 0 the
    score is divided by it and Gumbel noise added.
    """
    confidence = log_probs.max(axis=-1)
    codebook_index = np.arange(confidence.shape[0], dtype=np.float32)[:, None]
    scores = confidence - codebook_index * np.float32(layer_penalty_factor)
    if position_temperature > 0:
        scores = scores / np.float32(position_temperature) + gumbel_noise(noise.uniform(scores.shape))
    return scores


def reveal_top_k(
    tokens: np.ndarray, predicted: np.ndarray, scores: np.ndarray, reveal_count: int, mask_id: int = AUDIO_MASK_ID
) -> np.ndarray:
    """New tokens [8, T]: the `reveal_count` best-scoring still-masked cells take their predicted token."""
    open_scores = np.where(tokens == mask_id, scores, -np.inf).ravel()
    chosen = np.argsort(-open_scores, kind="stable")[:reveal_count]
    revealed = tokens.copy().ravel()
    revealed[chosen] = predicted.ravel()[chosen]
    return revealed.reshape(tokens.shape)


def cell_scores(cond_logits: np.ndarray, uncond_logits: np.ndarray, settings: GenerationSettings,
                noise: NoiseSource, mask_id: int = AUDIO_MASK_ID) -> CellScores:
    """One item's target logits [8, T, V] (both rows) -> its predicted token and score per cell.

    The numpy reference of the cell-scoring graphs; draws come in upstream's order (class, then position)."""
    log_probs = guided_log_probs(cond_logits, uncond_logits, settings.guidance_scale, mask_id)
    predicted = predict_tokens(log_probs, settings.class_temperature, noise)
    scores = score_cells(log_probs, settings.layer_penalty_factor, settings.position_temperature, noise)
    return predicted, scores


def step(
    tokens: np.ndarray,
    cond_logits: np.ndarray,
    uncond_logits: np.ndarray,
    reveal_count: int,
    settings: GenerationSettings,
    noise: NoiseSource,
    mask_id: int = AUDIO_MASK_ID,
) -> np.ndarray:
    """One decoding step for one item: its target logits [8, T, V] (both rows) -> its new tokens [8, T]."""
    predicted, scores = cell_scores(cond_logits, uncond_logits, settings, noise, mask_id)
    return reveal_top_k(tokens, predicted, scores, reveal_count, mask_id)


def per_item(settings: GenerationSettings | Sequence[GenerationSettings], count: int) -> list[GenerationSettings]:
    """One settings object per item: the same for all, or each item's own."""
    return list(settings) if isinstance(settings, Sequence) else [settings] * count


def numpy_scores(target_logits_fn: TargetLogitsFn, settings: GenerationSettings | Sequence[GenerationSettings],
                 mask_id: int = AUDIO_MASK_ID) -> ScoreFn:
    """A ScoreFn that scores each item's target logits on the host, in numpy: the reference path."""

    def score(input_ids: np.ndarray, batch: CfgBatch, target_lens: list[int], noises: list) -> list:
        logits = target_logits_fn(input_ids, batch, target_lens)
        return [None if noise is None else cell_scores(cond, uncond, item_settings, noise, mask_id)
                for (cond, uncond), noise, item_settings
                in zip(logits, noises, per_item(settings, len(target_lens)))]

    return score


def iterative_decode(
    batch: CfgBatch,
    target_lens: list[int],
    target_logits_fn: TargetLogitsFn | None,
    settings: GenerationSettings,
    noise: NoiseSource | Sequence[NoiseSource] | None = None,
    on_step: Callable[[int, int], None] | None = None,
    mask_id: int = AUDIO_MASK_ID,
    score_fn: ScoreFn | None = None,
) -> list[np.ndarray]:
    """Run all `settings.num_steps` steps; returns each item's codes [8, target_len] (int64).

    The model scores cells through `score_fn` (the cell-scoring graph), or else through
    `target_logits_fn` with the numpy maths. `noise` is one source shared in upstream's order
    (per step, per item), or one per item, so that an item's codes do not depend on what else
    shares its batch. `batch` is not modified. `on_step(step, num_steps)` is called after each step.
    """
    num_items = len(target_lens)
    noise = noise if noise is not None else RandomNoise()
    noises = list(noise) if isinstance(noise, Sequence) else [noise] * num_items
    if len(noises) != num_items:
        raise ValueError(f"{len(noises)} noise sources for {num_items} items")
    score_fn = score_fn if score_fn is not None else numpy_scores(target_logits_fn, settings, mask_id)
    input_ids = batch.input_ids.copy()
    num_codebooks = input_ids.shape[1]
    schedules = [reveal_schedule(t, settings.num_steps, settings.t_shift, num_codebooks) for t in target_lens]
    tokens = [np.full((num_codebooks, t), mask_id, dtype=np.int64) for t in target_lens]

    for step_index in range(settings.num_steps):
        reveal_counts = [schedule[step_index] for schedule in schedules]
        # An item with nothing to reveal draws no noise either, as upstream.
        scored = score_fn(input_ids, batch, target_lens,
                          [n if count > 0 else None for n, count in zip(noises, reveal_counts)])
        for item, (cond_len, target_len) in enumerate(zip(batch.cond_lens, target_lens)):
            if reveal_counts[item] <= 0:
                continue
            predicted, scores = scored[item]
            tokens[item] = reveal_top_k(tokens[item], predicted, scores, reveal_counts[item], mask_id)
            input_ids[item, :, cond_len - target_len:cond_len] = tokens[item]
            input_ids[num_items + item, :, :target_len] = tokens[item]
        if on_step is not None:
            on_step(step_index + 1, settings.num_steps)
    return tokens
