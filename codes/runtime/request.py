"""An utterance as the engine takes it: a settled request with its voice (a clone prompt,
codes/runtime/voices/voice.py, importable from here too), and the rules that make them from what a caller gives
(upstream's `_preprocess_all`, its long-form chunking). Data and pure rules: no model is needed, so drivers and
servers use them without the engine (codes/runtime/synthesis.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from codes.common.errors import UserError
from codes.runtime.contract.settings import GenerationSettings, max_item_frames
from codes.runtime.contract.specs import FRAME_RATE
from codes.runtime.text.cleanup import chunk_long_text, contains_chinese
from codes.runtime.text.duration import estimate_target_tokens, resolve_target_len
from codes.runtime.text.normalize import normalize_text as normalize
from codes.runtime.text.tokenizer import TextTokenizer
from codes.runtime.text.voice_design import resolve_instruct, resolve_language
from codes.runtime.voices.prompt import CfgBatch, build_cfg_batch, build_prompt
from codes.runtime.voices.voice import VOICE_FORMAT_VERSION, Voice  # noqa: F401 (a voice is part of a request)

NO_RECOGNISER = ("a reference clip needs its transcript (ref_text, --ref_text) unless the build has a recogniser, and "
                 "{folder} has none: pass the transcript, or build one with `python optimize.py --include-asr` "
                 "(or point --asr_dir at a build holding one)")


def needs_transcript(ref_text: str | None) -> bool:
    """Whether a reference clip's transcript is missing (None or blank), so the recogniser must make it."""
    return ref_text is None or not ref_text.strip()


@dataclass
class Request:
    """One utterance, settled: resolved language and instruct, optional voice, target length."""

    text: str
    lang: str | None
    instruct: str | None
    voice: Voice | None
    target_len: int
    speed: float


def is_long(request: Request, settings: GenerationSettings) -> bool:
    """Whether upstream generates the request in chunks: its length is over audio_chunk_threshold."""
    return request.target_len > max_item_frames(settings)


def long_form_chunks(request: Request, settings: GenerationSettings) -> list[str]:
    """A long request's text cut into upstream's chunks (~audio_chunk_duration each)."""
    return chunk_long_text(request.text, request.target_len, settings.audio_chunk_duration, FRAME_RATE)


def chunk_request(request: Request, text: str, voice: Voice | None) -> Request:
    """One chunk of a long request, cloning `voice` (its own, or its first chunk's), its length estimated at the
    request's speed, as upstream's `_generate_chunked` does."""
    target_len = estimate_target_tokens(text, voice.text if voice else None,
                                        voice.codes.shape[1] if voice else None, request.speed)
    return Request(text, request.lang, request.instruct, voice, target_len, request.speed)


def first_chunk_voice(codes: np.ndarray, text: str) -> Voice:
    """Upstream's long-form rule: a first chunk spoken without a voice is the reference of what follows.
    rms None: its loudness is not a reference level."""
    return Voice(codes, text, None)


def settle(texts: Sequence[str], language=None, instruct=None, voice: Voice | Sequence[Voice | None] | None = None,
           duration=None, speed=None, num_frames=None, normalize_text: bool = False) -> list[Request]:
    """Per-item requests as upstream's `_preprocess_all`: languages, (normalized) texts, instructs,
    target lengths. Every argument but normalize_text may be one value or one per text."""
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not texts:
        raise UserError("no text to synthesize")
    for text in texts:
        if not isinstance(text, str) or not text.strip():
            raise UserError("text is empty; give at least one word to synthesize")
    count = len(texts)
    languages, instructs = one_per_text(language, count, "language"), one_per_text(instruct, count, "instruct")
    durations, speeds = one_per_text(duration, count, "duration"), one_per_text(speed, count, "speed")
    frames, voices = one_per_text(num_frames, count, "num_frames"), one_per_text(voice, count, "voice")
    requests = []
    for text, lang, inst, dur, spd, n_frames, voice in zip(texts, languages, instructs, durations, speeds,
                                                           frames, voices):
        lang = resolve_language(lang)
        if normalize_text:  # upstream's order: after the language, before the instruct and the length
            text = normalize(text, lang)
        if dur is not None and not dur > 0:
            raise UserError(f"duration must be > 0 seconds, got {dur}")
        if spd is not None and not spd > 0:
            raise UserError(f"speed must be > 0, got {spd}")
        ref_frames = voice.codes.shape[1] if voice else None
        target_len, item_speed = resolve_target_len(text, voice.text if voice else None, ref_frames, spd, dur)
        if n_frames is not None:  # an exact frame count, as duration does in seconds
            if not n_frames >= 1:
                raise UserError(f"the number of audio tokens must be >= 1, got {n_frames}")
            plain = estimate_target_tokens(text, voice.text if voice else None, ref_frames)
            target_len, item_speed = int(n_frames), plain / int(n_frames)
        requests.append(Request(text, lang, resolve_instruct(inst, use_zh=contains_chinese(text)),
                                voice, target_len, item_speed))
    return requests


def prompt_batch(tokenizer: TextTokenizer, requests: list[Request], denoise: bool) -> CfgBatch:
    """The CFG batch that decodes `requests` as whole pieces."""
    items = [
        build_prompt(tokenizer, r.text, r.target_len,
                     ref_text=r.voice.text if r.voice else None,
                     ref_codes=r.voice.codes if r.voice else None,
                     lang=r.lang, instruct=r.instruct, denoise=denoise)
        for r in requests
    ]
    return build_cfg_batch(items, [r.target_len for r in requests])


def one_per_text(value, count: int, name: str) -> list:
    """A value given once, or one per text, as one per text."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(values) == 1:
        return values * count
    if len(values) != count:
        raise UserError(f"{name} has {len(values)} values for {count} texts; give one, or one per text")
    return values
