"""Word timings against openai-whisper's own forced alignment, on the same weights (needs torch).

openai-whisper's `whisper.timing.find_alignment` is the reference: its `Whisper` module loaded with the
checkpoint's weights (HF's layout maps onto it key by key) and alignment heads, fed the log-mel its
`transcribe` would give a window of the same 16 kHz samples. The recogniser's windows (where each starts,
how many frames and which tokens it reads) are given to both sides, so each window is compared as
find_alignment would align it; then merge_punctuations, as `transcribe(word_timestamps=True)` calls it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from codes.runtime.recognition.alignment import APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS

# HF Whisper's module names -> openai-whisper's, inside a layer
LAYER_NAMES = {
    "self_attn.q_proj": "attn.query", "self_attn.k_proj": "attn.key", "self_attn.v_proj": "attn.value",
    "self_attn.out_proj": "attn.out", "encoder_attn.q_proj": "cross_attn.query",
    "encoder_attn.k_proj": "cross_attn.key", "encoder_attn.v_proj": "cross_attn.value",
    "encoder_attn.out_proj": "cross_attn.out", "self_attn_layer_norm": "attn_ln",
    "encoder_attn_layer_norm": "cross_attn_ln", "final_layer_norm": "mlp_ln", "fc1": "mlp.0", "fc2": "mlp.2",
}
MODEL_NAMES = {
    "encoder.embed_positions.weight": "encoder.positional_embedding",
    "decoder.embed_positions.weight": "decoder.positional_embedding",
    "decoder.embed_tokens.": "decoder.token_embedding.", "encoder.layer_norm.": "encoder.ln_post.",
    "decoder.layer_norm.": "decoder.ln.", ".layers.": ".blocks.",
}


def openai_key(hf_key: str) -> str | None:
    """An HF WhisperForConditionalGeneration weight's name in openai-whisper's Whisper (None: proj_out, which
    is tied to the token embedding there)."""
    key = hf_key.removeprefix("model.")
    if key.startswith("proj_out."):
        return None
    for before, after in MODEL_NAMES.items():
        key = key.replace(before, after)
    for before, after in LAYER_NAMES.items():
        key = key.replace(f".{before}.", f".{after}.")
    return key


def openai_whisper_model(folder: Path):
    """openai-whisper's `Whisper` with an HF checkpoint's weights and its generation_config.alignment_heads.
    openai-whisper builds its MLPs 4x the width; a checkpoint of another width gets MLPs of its own."""
    import torch
    from safetensors.torch import load_file
    from whisper.model import ModelDimensions, Whisper

    folder = Path(folder)
    config = json.loads((folder / "config.json").read_text())
    heads = json.loads((folder / "generation_config.json").read_text())["alignment_heads"]
    dims = ModelDimensions(
        n_mels=config["num_mel_bins"], n_audio_ctx=config["max_source_positions"], n_audio_state=config["d_model"],
        n_audio_head=config["encoder_attention_heads"], n_audio_layer=config["encoder_layers"],
        n_vocab=config["vocab_size"], n_text_ctx=config["max_target_positions"], n_text_state=config["d_model"],
        n_text_head=config["decoder_attention_heads"], n_text_layer=config["decoder_layers"])
    model = Whisper(dims)
    for blocks, width in ((model.encoder.blocks, config["encoder_ffn_dim"]),
                          (model.decoder.blocks, config["decoder_ffn_dim"])):
        if width != 4 * config["d_model"]:
            for block in blocks:
                block.mlp = torch.nn.Sequential(torch.nn.Linear(config["d_model"], width), torch.nn.GELU(),
                                                torch.nn.Linear(width, config["d_model"]))
    weights = {openai_key(k): v for k, v in load_file(str(folder / "model.safetensors")).items()}
    weights.pop(None, None)
    missing, unexpected = model.load_state_dict(weights, strict=False)
    if unexpected or set(missing) - {"alignment_heads"}:
        raise ValueError(f"HF -> openai-whisper names do not match: missing {missing}, unexpected {unexpected}")
    mask = torch.zeros(dims.n_text_layer, dims.n_text_head, dtype=torch.bool)
    for layer, head in heads:
        mask[layer, head] = True
    model.register_buffer("alignment_heads", mask.to_sparse(), persistent=False)
    return model.eval()


def openai_tokenizer(language: str):
    from whisper.tokenizer import get_tokenizer

    return get_tokenizer(multilingual=True, num_languages=100, language=language, task="transcribe")


def reference_words(model, wav_16k: np.ndarray, windows, language: str) -> list[dict]:
    """openai-whisper's words for each of the recogniser's windows: find_alignment over the window's tokens
    and frames of transcribe's log-mel (log_mel_spectrogram(audio, padding=N_SAMPLES), each window
    pad_or_trim'd), then merge_punctuations; stripped words, seconds from the clip's start."""
    import torch
    import whisper
    from whisper.timing import find_alignment, merge_punctuations

    tokenizer = openai_tokenizer(language)
    audio = torch.from_numpy(np.asarray(wav_16k, np.float32))
    mel = whisper.log_mel_spectrogram(audio, model.dims.n_mels, padding=whisper.audio.N_SAMPLES)
    content = mel.shape[-1] - whisper.audio.N_FRAMES
    words = []
    for window in windows:
        if window.num_frames == 0:  # the recogniser's words past the audio's end
            words.extend(window.words)
            continue
        segment = whisper.pad_or_trim(mel[:, window.seek : window.seek + min(whisper.audio.N_FRAMES, content - window.seek)],
                                      whisper.audio.N_FRAMES)
        with torch.no_grad():
            timed = find_alignment(model, tokenizer, window.tokens, segment, window.num_frames)
        merge_punctuations(timed, PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS)
        offset = window.seek * whisper.audio.HOP_LENGTH / whisper.audio.SAMPLE_RATE
        words.extend({"word": t.word.strip(), "start": offset + float(t.start), "end": offset + float(t.end)}
                     for t in timed if t.word.strip())
    return words


def largest_time_difference(ours: list[dict], theirs: list[dict]) -> float:
    """The largest difference between the two lists' start or end times, in seconds (inf if their words differ)."""
    if [w["word"] for w in ours] != [w["word"] for w in theirs]:
        return float("inf")
    return max((abs(a[key] - b[key]) for a, b in zip(ours, theirs) for key in ("start", "end")), default=0.0)
