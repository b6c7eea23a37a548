"""An utterance as the engine takes it: a voice (a clone prompt), a settled request, and the rules that make
them from what a caller gives (upstream's `_preprocess_all`, its long-form chunking). Data and pure rules:
no model is needed, so drivers and servers use them without the engine (codes/runtime/synthesis.py)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.common.fileio import atomic_path
from codes.runtime import prompt_file
from codes.runtime.duration import estimate_target_tokens, resolve_target_len
from codes.runtime.engine import max_item_frames
from codes.runtime.normalize import normalize_text as normalize
from codes.runtime.prompt import CfgBatch, build_cfg_batch, build_prompt, check_ref_codes
from codes.runtime.settings import GenerationSettings
from codes.runtime.specs import FRAME_RATE
from codes.runtime.text import chunk_long_text, contains_chinese
from codes.runtime.text_tokenizer import TextTokenizer
from codes.runtime.voice_design import resolve_instruct, resolve_language

VOICE_FORMAT_VERSION = 1
NO_RECOGNISER = ("a reference clip needs its transcript (ref_text, --ref_text) unless the build has a recogniser, and "
                 "{folder} has none: pass the transcript, or build one with `python optimize.py --include-asr` "
                 "(or point --asr_dir at a build holding one)")


def needs_transcript(ref_text: str | None) -> bool:
    """Whether a reference clip's transcript is missing (None or blank), so the recogniser must make it."""
    return ref_text is None or not ref_text.strip()


@dataclass
class Voice:
    """A reusable clone prompt (upstream's VoiceClonePrompt): reference codes, transcript and RMS."""

    codes: np.ndarray  # [8, T_ref] int64
    text: str
    rms: float | None  # None: a synthesized reference, which sets no loudness

    def save(self, path: str | Path, exclusive: bool = False) -> None:
        """Written whole or not at all; `exclusive`: FileExistsError rather than replacing a file.
        A path ending in .pt gets upstream's format (VoiceClonePrompt.load reads it), any other our .npz."""
        path = Path(path)
        if path.suffix.lower() == prompt_file.SUFFIX:
            with atomic_path(path, exclusive=exclusive) as tmp:
                tmp.write_bytes(self.to_bytes("pt"))
            return
        with atomic_path(path, suffix=".npz", exclusive=exclusive) as tmp:
            tmp.write_bytes(self.to_bytes("npz"))

    def to_bytes(self, kind: str = "npz") -> bytes:
        """The file's bytes: "npz", ours, or "pt", upstream's VoiceClonePrompt.save."""
        if kind == "pt":
            return prompt_file.prompt_bytes(self.codes, self.text, self.rms)
        buffer = io.BytesIO()
        np.savez(buffer, codes=self.codes, text=np.array(self.text),
                 rms=np.array(np.nan if self.rms is None else self.rms, dtype=np.float64),
                 format_version=np.array(VOICE_FORMAT_VERSION))
        return buffer.getvalue()

    @classmethod
    def load(cls, path: str | Path) -> Voice:
        """Ours (.npz), upstream's VoiceClonePrompt.save (.pt) or wyoming-piper's ref.rvq, told apart by content."""
        try:
            with open(path, "rb") as f:
                data = f.read(prompt_file.MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise UserError(f"cannot read voice file {path} ({exc.strerror or type(exc).__name__}); "
                            "save one with --save_voice") from None
        return cls.from_bytes(data, str(path))

    @classmethod
    def from_bytes(cls, data: bytes, name: str) -> Voice:
        """A voice file's bytes (see load); `name` is what an error calls it."""
        if prompt_file.is_prompt_file(data):
            return cls(*prompt_file.read_prompt(data, name))
        arrays = prompt_file.read_npz(data, name)
        version, text, rms = arrays["format_version"], arrays["text"], arrays["rms"]
        if version.shape != () or version.dtype.kind not in "iu" or int(version) != VOICE_FORMAT_VERSION:
            raise UserError(f"{name} is a voice file of another format version; save it again with --save_voice")
        if text.shape != () or text.dtype.kind != "U" or rms.shape != () or rms.dtype.kind != "f":
            raise UserError(f"cannot read voice file {name}: its text or rms is not a voice's; save one with --save_voice")
        try:
            codes = check_ref_codes(arrays["codes"])
        except UserError as exc:
            raise UserError(f"cannot read voice file {name}: {exc}") from None
        rms = float(rms)
        return cls(codes, str(text), None if np.isnan(rms) else rms)


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
