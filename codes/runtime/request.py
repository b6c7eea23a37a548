"""An utterance as the engine takes it: a settled request with its voice (a clone prompt,
codes/runtime/voices/voice.py, importable from here too), and the rules that make them from what a caller gives
(upstream's `_preprocess_all`), then the plan that decodes them: each request's noise source and, for a long
one, its chunks (upstream's `_generate_chunked`), all settled here before any is decoded. Data and pure rules:
no model is needed, so drivers and servers use them without the engine (codes/runtime/synthesis.py)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from codes.common.errors import UserError
from codes.runtime.contract.settings import GenerationSettings, max_item_frames
from codes.runtime.contract.specs import FRAME_RATE
from codes.runtime.model.decoding import NoiseSource, RandomNoise
from codes.runtime.text.cleanup import chunk_long_text, contains_chinese
from codes.runtime.text.duration import estimate_target_tokens, resolve_target_len
from codes.runtime.text.normalize import normalize_text as normalize
from codes.runtime.text.voice_design import resolve_instruct, resolve_language
from codes.runtime.voices.voice import VOICE_FORMAT_VERSION, Voice, first_chunk_voice  # noqa: F401 (part of a request)

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


def chunk_requests(request: Request, settings: GenerationSettings) -> list[Request]:
    """A long request's chunks (long_form_chunks), each settled as chunk_request settles it, cloning the
    request's voice; without one, each chunk after the first clones the first, whose codes are [8, its
    target_len]: its length is known now, its voice once those codes are made (first_chunk_voice)."""
    texts = long_form_chunks(request, settings)
    voice = request.voice
    ref_text, ref_frames = (voice.text, voice.codes.shape[1]) if voice else (None, None)
    chunks: list[Request] = []
    for text in texts:
        chunks.append(Request(text, request.lang, request.instruct, voice,
                              estimate_target_tokens(text, ref_text, ref_frames, request.speed), request.speed))
        if voice is None and len(chunks) == 1:
            ref_text, ref_frames = text, chunks[0].target_len
    return chunks


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


def one_per_text(value, count: int, name: str) -> list:
    """A value given once, or one per text, as one per text."""
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(values) == 1:
        return values * count
    if len(values) != count:
        raise UserError(f"{name} has {len(values)} values for {count} texts; give one, or one per text")
    return values


def item_noises(seed: int | None, count: int, first: int = 0) -> list[RandomNoise]:
    """One generator per item, so an item's noise does not depend on what shares its batch: item i of a
    seeded run draws from seed + i (a lone item from the seed itself); unseeded items from fresh entropy."""
    return [RandomNoise(None if seed is None else seed + first + i) for i in range(count)]


@dataclass
class DecodingPlan:
    """Settled requests as the engine decodes them, everything about them settled before any is decoded: each
    one's noise source, and the rounds that decode them, one batch each: the short requests whole, then the long
    ones' chunks, batched across requests by chunk index (upstream's `_generate_chunked`)."""

    requests: list[Request]
    noises: list[NoiseSource]
    rounds: list[list[tuple[int, Request]]]  # (a request's index, what the round decodes of it)
    clones_first_chunk: set[int]  # long requests without a voice: each chunk after the first clones the first


def plan_decoding(requests: list[Request], settings: GenerationSettings,
                  noise: NoiseSource | Sequence[NoiseSource] | None = None, seed: int | None = None) -> DecodingPlan:
    """The plan that decodes `requests`. noise: one source per request (each request's codes then depend on
    nothing else in the batch), or one source shared in upstream's draw order; None: a source per request,
    item i drawing from seed + i (item_noises; fresh entropy without a seed)."""
    if noise is None:
        noises = item_noises(seed, len(requests))
    else:
        noises = list(noise) if isinstance(noise, Sequence) else [noise] * len(requests)
    long = [i for i, r in enumerate(requests) if is_long(r, settings)]
    with_voice = [requests[i].voice is not None for i in long]
    if any(with_voice) and not all(with_voice):
        raise UserError("long texts in one batch must all have a reference voice or none")
    chunks = {i: chunk_requests(requests[i], settings) for i in long}
    rounds = [[(i, r) for i, r in enumerate(requests) if i not in chunks]]
    rounds += [[(i, item_chunks[index]) for i, item_chunks in chunks.items() if index < len(item_chunks)]
               for index in range(max(map(len, chunks.values()), default=0))]
    return DecodingPlan(requests, noises, [batch for batch in rounds if batch],
                {i for i in long if requests[i].voice is None})

