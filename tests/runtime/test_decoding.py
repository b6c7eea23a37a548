"""codes.runtime.model.decoding against upstream's decoding maths, piece by piece and over whole runs."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers.upstream_twins import (  # noqa: F401
    RecordingNoise,
    ReplayedRandLike,
    ToyModel,
    full_logits,
    hf_tokenizer,
    text_tokenizer,
    tokenizer_dir,
    upstream_self,
    upstream_task,
)

from omnivoice.models.omnivoice import (
    OmniVoiceGenerationConfig,
    _filter_top_k,
    _get_time_steps,
    _gumbel_sample,
)

from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.model import decoding
from codes.runtime.voices.prompt import build_cfg_batch, build_prompt


def _upstream_schedule(target_len, num_step, t_shift):
    """The per-step counts as upstream's `_generate_iterative` computes them."""
    times = _get_time_steps(0.0, 1.0, num_step, t_shift).tolist()
    total = target_len * 8
    remaining, counts = total, []
    for step in range(num_step):
        count = remaining if step == num_step - 1 else min(math.ceil(total * (times[step + 1] - times[step])), remaining)
        counts.append(int(count))
        remaining -= int(count)
    return counts


@pytest.mark.parametrize("t_shift", [0.1, 0.3, 0.5, 1.0, 2.0])
def test_time_steps_are_bit_equal_to_upstream(t_shift):
    for num_step in range(1, 257):
        expected = _get_time_steps(0.0, 1.0, num_step, t_shift).numpy()
        ours = decoding.time_steps(num_step, t_shift)
        assert ours.dtype == np.float32
        np.testing.assert_array_equal(ours, expected, err_msg=f"num_step={num_step}")


@pytest.mark.parametrize("t_shift", [0.1, 0.5, 1.0])
def test_reveal_schedule_equals_upstream(t_shift):
    for num_step in (1, 2, 7, 8, 10, 16, 32, 50, 64):
        for target_len in range(1, 800, 11):
            ours = decoding.reveal_schedule(target_len, num_step, t_shift)
            assert ours == _upstream_schedule(target_len, num_step, t_shift), (target_len, num_step)
            assert sum(ours) == 8 * target_len and min(ours) >= 0


def _random_logits(seed, shape=(8, 13, 1025)):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32) * 3


def test_log_softmax_matches_torch():
    logits = _random_logits(0)
    expected = F.log_softmax(torch.from_numpy(logits), dim=-1).numpy()
    np.testing.assert_allclose(decoding.log_softmax(logits), expected, atol=2e-6)


@pytest.mark.parametrize("guidance_scale", [0.0, 2.0, 3.5])
def test_guided_log_probs_and_confidence_match_upstream(guidance_scale):
    cond, uncond = _random_logits(1), _random_logits(2)
    settings = OmniVoiceGenerationConfig(guidance_scale=guidance_scale, class_temperature=0.0)
    pred, confidence = upstream_self()._predict_tokens_with_scoring(
        torch.from_numpy(cond)[None], torch.from_numpy(uncond)[None], settings
    )
    log_probs = decoding.guided_log_probs(cond, uncond, guidance_scale)
    assert np.isneginf(log_probs[..., 1024]).all()
    np.testing.assert_array_equal(decoding.predict_tokens(log_probs, 0.0, noise=None), pred[0].numpy())
    np.testing.assert_allclose(log_probs.max(axis=-1), confidence[0].numpy(), atol=1e-5)


def test_filter_top_k_keeps_the_same_cells_as_upstream():
    log_probs = decoding.guided_log_probs(_random_logits(3), _random_logits(4), 2.0)
    expected = _filter_top_k(torch.from_numpy(log_probs), ratio=0.1).numpy()
    ours = decoding.filter_top_k(log_probs, ratio=0.1)
    np.testing.assert_array_equal(np.isneginf(ours), np.isneginf(expected))
    np.testing.assert_array_equal(ours, expected)
    assert (np.isfinite(ours).sum(axis=-1) == math.ceil(0.1 * 1025)).all()


def test_gumbel_noise_matches_upstream_formula(monkeypatch):
    replay = ReplayedRandLike(seed=5)
    monkeypatch.setattr(torch, "rand_like", replay)
    expected = _gumbel_sample(torch.zeros(4, 1000), temperature=1.0).numpy()
    uniform = np.random.default_rng(5).random((4, 1000), dtype=np.float32)
    np.testing.assert_allclose(decoding.gumbel_noise(uniform), expected, rtol=1e-6, atol=1e-6)
    assert np.isfinite(decoding.gumbel_noise(np.zeros(3, dtype=np.float32))).all()


def test_score_cells_penalises_later_codebooks():
    log_probs = np.zeros((8, 4, 1025), dtype=np.float32)
    scores = decoding.score_cells(log_probs, layer_penalty_factor=5.0, position_temperature=0.0, noise=None)
    np.testing.assert_array_equal(scores[:, 0], -5.0 * np.arange(8))


def test_reveal_top_k_only_fills_masked_cells_in_stable_score_order():
    tokens = np.full((2, 3), 1024)
    tokens[0, 0] = 7
    predicted = np.arange(6).reshape(2, 3)
    scores = np.array([[9.0, 1.0, 1.0], [5.0, 1.0, 0.0]], dtype=np.float32)
    revealed = decoding.reveal_top_k(tokens, predicted, scores, reveal_count=2)
    # (0,0) is taken already; best open cell is (1,0); (0,1) and (0,2) tie and the lower index wins.
    np.testing.assert_array_equal(revealed, [[7, 1, 1024], [3, 1024, 1024]])


def test_random_noise_is_reproducible_float32_in_unit_interval():
    first, second = decoding.RandomNoise(3).uniform((4, 5)), decoding.RandomNoise(3).uniform((4, 5))
    np.testing.assert_array_equal(first, second)
    assert first.dtype == np.float32 and 0 <= first.min() and first.max() < 1


# ---------------------------------------------------------------------------
# Whole decoding runs: upstream's `_generate_iterative` and ours on the same toy model
# ---------------------------------------------------------------------------

REF_CODES = np.random.default_rng(11).integers(0, 1024, (8, 12))
RUN_ITEMS = [  # (text, target_len, ref_text, with_ref, lang, instruct)
    ("Hello there, how are you today?", 23, "This is the reference.", True, "en", None),
    ("你好 [laughter] 世界。", 9, None, False, "zh", "女，低音调"),
    ("A third item of another length.", 16, None, False, None, "male, british accent"),
]


@pytest.fixture
def one_torch_thread():
    """Tiny torch ops on a shared 2-core machine run far faster without intra-op threads."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


def _run_upstream(hf_tok, items, config, seed, monkeypatch):
    replay = ReplayedRandLike(seed)
    monkeypatch.setattr(torch, "rand_like", replay)
    upstream = upstream_self(text_tokenizer=hf_tok, logits_fn=ToyModel())
    task = upstream_task(items, lambda item: REF_CODES if item[3] else None)
    tokens = upstream._generate_iterative(task, config)
    return [t.numpy() for t in tokens], replay.shapes


def _run_ours(tok, items, settings, seed):
    prompts = [
        build_prompt(tok, text, target_len, ref_text, REF_CODES if with_ref else None, lang, instruct, settings.denoise)
        for text, target_len, ref_text, with_ref, lang, instruct in items
    ]
    target_lens = [item[1] for item in items]
    batch = build_cfg_batch(prompts, target_lens)
    noise = RecordingNoise(seed)
    steps_seen = []
    tokens = decoding.iterative_decode(
        batch, target_lens, full_logits(ToyModel()), settings, noise,
        on_step=lambda done, total: steps_seen.append(done),
    )
    assert steps_seen == list(range(1, settings.num_steps + 1))
    return tokens, noise.shapes


GREEDY = dict(position_temperature=0.0, class_temperature=0.0)
NOISY = dict(position_temperature=5.0, class_temperature=1.0)
DEFAULT = dict(position_temperature=5.0, class_temperature=0.0)  # upstream's defaults
RUNS = [
    (picked, num_step, temperatures)
    for picked in ([0], [0, 1, 2])
    for num_step in (32, 8)
    for temperatures in (GREEDY, NOISY)
] + [([0, 1, 2], 32, DEFAULT)]


@pytest.mark.parametrize("picked, num_step, temperatures", RUNS, ids=[
    f"{len(p)}items-{n}steps-pos{t['position_temperature']:g}-class{t['class_temperature']:g}" for p, n, t in RUNS
])
def test_decoding_runs_give_upstream_tokens(
    picked, num_step, temperatures, text_tokenizer, hf_tokenizer, monkeypatch, one_torch_thread
):
    items = [RUN_ITEMS[i] for i in picked]
    config = OmniVoiceGenerationConfig(num_step=num_step, **temperatures)
    expected, upstream_draws = _run_upstream(hf_tokenizer, items, config, 17, monkeypatch)
    ours, our_draws = _run_ours(text_tokenizer, items, GenerationSettings(num_steps=num_step, **temperatures), 17)
    # Same draws in the same order (upstream's shapes carry a leading batch axis of 1).
    assert [shape[1:] for shape in upstream_draws] == our_draws
    for item_tokens, item_expected, item in zip(ours, expected, items):
        assert item_tokens.shape == (8, item[1]) and item_tokens.dtype == np.int64
        assert (item_tokens != 1024).all()
        np.testing.assert_array_equal(item_tokens, item_expected)


def test_decoding_tokens_depend_on_the_noise(text_tokenizer):
    settings = GenerationSettings(num_steps=8)
    first, _ = _run_ours(text_tokenizer, RUN_ITEMS[:1], settings, seed=1)
    second, _ = _run_ours(text_tokenizer, RUN_ITEMS[:1], settings, seed=2)
    assert (first[0] != second[0]).any()
