"""codes.runtime.voices.prompt against upstream's `_prepare_inference_inputs` and the CFG batch of `_generate_iterative`."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers.upstream_twins import (  # noqa: F401 (fixtures)
    ToyModel,
    hf_tokenizer,
    text_tokenizer,
    tokenizer_dir,
    upstream_self,
    upstream_task,
)

from omnivoice.models.omnivoice import OmniVoiceGenerationConfig

from codes.common.errors import UserError
from codes.runtime.voices import prompt

RNG = np.random.default_rng(7)
REF_CODES = {n: RNG.integers(0, 1024, (8, n)) for n in (3, 11)}

# (text, target_len, ref_text, ref_frames, lang, instruct, denoise)
ITEMS = [
    ("Hello world.", 9, None, None, None, None, True),
    ("Hello there [laughter] how are you?", 14, "This is the reference.", 11, "en", None, True),
    ("你好 [sigh] 世界！[question-en]", 6, "参考 文本。", 3, "zh", "女，河南话", True),
    ("No denoise with a reference.", 5, "Ref text", 3, None, "male, british accent", False),
    ("Denoise without a reference is ignored.", 4, None, None, "ja", "female, low pitch", True),
    ("  spaces\nand\r\nnewlines （括号） ", 7, "  ref\twith tab ", 11, None, None, True),
    ("[laughter]", 3, None, None, None, None, True),
]


def _ours(tokenizer, text, target_len, ref_text, ref_frames, lang, instruct, denoise):
    ref_codes = REF_CODES[ref_frames] if ref_frames else None
    return prompt.build_prompt(tokenizer, text, target_len, ref_text, ref_codes, lang, instruct, denoise)


def _upstream(hf_tok, text, target_len, ref_text, ref_frames, lang, instruct, denoise):
    ref_codes = torch.from_numpy(REF_CODES[ref_frames]) if ref_frames else None
    inputs = upstream_self(text_tokenizer=hf_tok)._prepare_inference_inputs(
        text, target_len, ref_text, ref_codes, lang, instruct, denoise
    )
    return inputs["input_ids"][0].numpy(), inputs["audio_mask"][0].numpy()


@pytest.mark.parametrize("item", ITEMS, ids=range(len(ITEMS)))
def test_build_prompt_equals_upstream(item, text_tokenizer, hf_tokenizer):
    ours = _ours(text_tokenizer, *item)
    input_ids, audio_mask = _upstream(hf_tokenizer, *item)
    assert ours.input_ids.dtype == np.int64 and ours.audio_mask.dtype == bool
    np.testing.assert_array_equal(ours.input_ids, input_ids)
    np.testing.assert_array_equal(ours.audio_mask, audio_mask)


def test_style_and_text_markers_are_single_special_tokens(text_tokenizer):
    ids = prompt.build_prompt(text_tokenizer, "Hi.", 2, ref_text="Ref.", ref_codes=REF_CODES[3]).input_ids[0]
    marker_ids = [
        text_tokenizer.token_id(t) for t in (prompt.DENOISE, prompt.LANG_START, prompt.TEXT_START, prompt.TEXT_END)
    ]
    assert ids[0] == marker_ids[0] and ids[1] == marker_ids[1]
    assert marker_ids[2] in ids and marker_ids[3] in ids


def _upstream_first_batch(hf_tok, items):
    """The (input_ids, audio_mask, attention_mask) upstream feeds its model at step 1."""
    upstream = upstream_self(text_tokenizer=hf_tok, logits_fn=ToyModel())
    task = upstream_task(items, lambda item: REF_CODES[item[3]] if item[3] else None)
    upstream._generate_iterative(task, OmniVoiceGenerationConfig(num_step=1, denoise=True))
    return [t.numpy() for t in upstream.forward_calls[0]]


@pytest.mark.parametrize("picked", [[0], [1, 0, 2], [4, 6, 5, 3]], ids=["one", "three", "four"])
def test_build_cfg_batch_equals_upstream(picked, text_tokenizer, hf_tokenizer):
    items = [(*ITEMS[i][:6], True) for i in picked]  # upstream's denoise is one setting per batch
    ours = prompt.build_cfg_batch([_ours(text_tokenizer, *item) for item in items], [item[1] for item in items])
    input_ids, audio_mask, attention_mask = _upstream_first_batch(hf_tokenizer, items)
    np.testing.assert_array_equal(ours.input_ids, input_ids)
    np.testing.assert_array_equal(ours.audio_mask, audio_mask)
    np.testing.assert_array_equal(ours.attention_mask, attention_mask)
    assert ours.cond_lens == [_ours(text_tokenizer, *item).input_ids.shape[1] for item in items]


def test_cfg_batch_layout_rules():
    items = [
        (np.full((8, 6), 5, dtype=np.int64), np.arange(6) >= 3),
        (np.full((8, 10), 7, dtype=np.int64), np.arange(10) >= 4),
    ]
    batch = prompt.build_cfg_batch(items, [2, 3])
    mask = batch.attention_mask[:, 0]
    assert batch.cond_lens == [6, 10]
    assert batch.input_ids.shape == (4, 8, 10) and mask.shape == (4, 10, 10)
    assert (batch.input_ids[0, :, 6:] == prompt.PAD_ID).all()
    assert not mask[0, 6:].any() and not mask[0, :, 6:].any()  # conditional padding: attends to nothing
    assert mask[2, :2, :2].all() and not mask[2, :2, 2:].any()  # unconditional: its target square...
    assert (mask[2, 2:, 2:] == np.eye(8, dtype=bool)).all()  # ...and padding attends to itself only
    assert (batch.audio_mask[2] == (np.arange(10) < 2)).all()


def test_bad_inputs_raise_user_error(text_tokenizer):
    with pytest.raises(UserError, match="target length"):
        prompt.build_prompt(text_tokenizer, "Hi", 0)
    with pytest.raises(UserError, match="shape"):
        prompt.build_prompt(text_tokenizer, "Hi", 3, "Ref", np.zeros((4, 5), dtype=np.int64))
    with pytest.raises(UserError, match="integers"):
        prompt.build_prompt(text_tokenizer, "Hi", 3, "Ref", np.full((8, 5), 1024))
