"""The model's input for one item, and the padded CFG batch, as upstream builds them.

One item's conditional sequence, every column repeated over the 8 codebooks:

    [<|denoise|>]<|lang_start|>{lang|None}<|lang_end|><|instruct_start|>{instruct|None}<|instruct_end|>
    <|text_start|>{ref_text + " " + text, cleaned}<|text_end|>
    reference codes [8, T_ref] (if any), then the target: [8, target_len] all MASK

`audio_mask` is True from the reference codes (or the target) on. The text
tokenizer is any object with `encode(text) -> list[int]` that recognises the
special tokens written in the text and adds none of its own (no BOS/EOS), as
upstream's Qwen tokenizer does; the runtime's is codes.runtime.text.tokenizer.TextTokenizer.
"""

from __future__ import annotations

from typing import NamedTuple, Protocol

import numpy as np

from codes.common.errors import UserError
from codes.runtime.contract.specs import AUDIO_MASK_ID, CODEBOOK_SIZE, NUM_CODEBOOKS
from codes.runtime.text.cleanup import combine_text, split_nonverbal

DENOISE = "<|denoise|>"
LANG_START, LANG_END = "<|lang_start|>", "<|lang_end|>"
INSTRUCT_START, INSTRUCT_END = "<|instruct_start|>", "<|instruct_end|>"
TEXT_START, TEXT_END = "<|text_start|>", "<|text_end|>"
PAD_ID = AUDIO_MASK_ID  # upstream pads the batch with the MASK id; padded cells are never attended to


class TextTokenizerLike(Protocol):
    def encode(self, text: str) -> list[int]: ...


class PromptItem(NamedTuple):
    input_ids: np.ndarray  # [8, N] int64
    audio_mask: np.ndarray  # [N] bool


class CfgBatch(NamedTuple):
    input_ids: np.ndarray  # [2B, 8, S] int64: conditional rows 0..B-1, unconditional rows B..2B-1
    audio_mask: np.ndarray  # [2B, S] bool
    attention_mask: np.ndarray  # [2B, 1, S, S] bool: query i may attend to key j
    cond_lens: list[int]  # each conditional row's unpadded length


def style_text(lang: str | None, instruct: str | None, with_reference: bool, denoise: bool) -> str:
    """The style prefix; "None" stands in for a missing language or instruct, as in training."""
    prefix = DENOISE if denoise and with_reference else ""
    return f"{prefix}{LANG_START}{lang or 'None'}{LANG_END}{INSTRUCT_START}{instruct or 'None'}{INSTRUCT_END}"


def text_token_ids(tokenizer: TextTokenizerLike, text: str, ref_text: str | None = None) -> list[int]:
    """<|text_start|>{ref_text text}<|text_end|> tokenized, each non-verbal tag on its own."""
    wrapped = f"{TEXT_START}{combine_text(text, ref_text)}{TEXT_END}"
    return [token for piece in split_nonverbal(wrapped) for token in tokenizer.encode(piece)]


def check_ref_codes(ref_codes) -> np.ndarray:
    """Reference codes as an int64 [8, T_ref] array with values in [0, 1024)."""
    codes = np.asarray(ref_codes)
    if codes.ndim != 2 or codes.shape[0] != NUM_CODEBOOKS or codes.shape[1] == 0:
        raise UserError(f"reference codes must have shape [{NUM_CODEBOOKS}, frames >= 1], got {list(codes.shape)}")
    if not np.issubdtype(codes.dtype, np.integer) or codes.min() < 0 or codes.max() >= CODEBOOK_SIZE:
        raise UserError(f"reference codes must be integers in [0, {CODEBOOK_SIZE}); the voice prompt is damaged")
    return codes.astype(np.int64)


def build_prompt(
    tokenizer: TextTokenizerLike,
    text: str,
    target_len: int,
    ref_text: str | None = None,
    ref_codes: np.ndarray | None = None,
    lang: str | None = None,
    instruct: str | None = None,
    denoise: bool = True,
) -> PromptItem:
    """One item's conditional input_ids [8, N] and audio_mask [N] (upstream `_prepare_inference_inputs`).

    `lang` and `instruct` must already be resolved (codes.runtime.text.voice_design).
    """
    if target_len < 1:
        raise UserError(f"target length must be at least 1 frame, got {target_len}")
    with_reference = ref_codes is not None
    text_ids = tokenizer.encode(style_text(lang, instruct, with_reference, denoise))
    text_ids += text_token_ids(tokenizer, text, ref_text)
    text_rows = np.tile(np.asarray(text_ids, dtype=np.int64), (NUM_CODEBOOKS, 1))

    audio_parts = [check_ref_codes(ref_codes)] if with_reference else []
    audio_parts.append(np.full((NUM_CODEBOOKS, target_len), AUDIO_MASK_ID, dtype=np.int64))
    input_ids = np.concatenate([text_rows, *audio_parts], axis=1)
    audio_mask = np.arange(input_ids.shape[1]) >= len(text_ids)
    return PromptItem(input_ids, audio_mask)


def build_cfg_batch(items: list[PromptItem] | list[tuple[np.ndarray, np.ndarray]], target_lens: list[int]) -> CfgBatch:
    """The 2B-row batch for classifier-free guidance, padded to the longest conditional row.

    Conditional row i holds item i's whole prompt; unconditional row B + i holds
    only its target region, at the start. Each row attends within its own valid
    square. Padded positions of unconditional rows attend only to themselves;
    padded positions of conditional rows attend to nothing (upstream leaves
    those mask rows all False; their outputs are never read).
    """
    if len(items) != len(target_lens) or not items:
        raise ValueError(f"need one target length per item, got {len(items)} items and {len(target_lens)} lengths")
    num_items = len(items)
    items = [PromptItem(*item) for item in items]
    cond_lens = [item.input_ids.shape[1] for item in items]
    seq_len = max(cond_lens)
    input_ids = np.full((2 * num_items, NUM_CODEBOOKS, seq_len), PAD_ID, dtype=np.int64)
    audio_mask = np.zeros((2 * num_items, seq_len), dtype=bool)
    attention_mask = np.zeros((2 * num_items, 1, seq_len, seq_len), dtype=bool)

    for i, (item, cond_len, target_len) in enumerate(zip(items, cond_lens, target_lens)):
        if not 1 <= target_len <= cond_len:
            raise ValueError(f"target length {target_len} does not fit item {i} of length {cond_len}")
        cond_row, uncond_row = i, num_items + i
        input_ids[cond_row, :, :cond_len] = item.input_ids
        audio_mask[cond_row, :cond_len] = item.audio_mask
        attention_mask[cond_row, 0, :cond_len, :cond_len] = True

        input_ids[uncond_row, :, :target_len] = item.input_ids[:, -target_len:]
        audio_mask[uncond_row, :target_len] = item.audio_mask[-target_len:]
        attention_mask[uncond_row, 0, :target_len, :target_len] = True
        padding = np.arange(target_len, seq_len)
        attention_mask[uncond_row, 0, padding, padding] = True
    return CfgBatch(input_ids, audio_mask, attention_mask, cond_lens)


def prompt_batch(tokenizer: TextTokenizerLike, requests, denoise: bool) -> CfgBatch:
    """The CFG batch that decodes settled requests (codes.runtime.request.Request: text, target_len, lang,
    instruct and voice, its text and codes) as whole pieces."""
    items = [
        build_prompt(tokenizer, r.text, r.target_len,
                     ref_text=r.voice.text if r.voice else None,
                     ref_codes=r.voice.codes if r.voice else None,
                     lang=r.lang, instruct=r.instruct, denoise=denoise)
        for r in requests
    ]
    return build_cfg_batch(items, [r.target_len for r in requests])
