"""A speech request's fields, checked once for every door: OpenAI's names and ours, over the server's
generation settings (the per-request numbers are codes/runtime/contract/settings.py's TUNABLE, its switches
SWITCHES, neither re-listed). A one-off clone (`ref_audio`, base64 of a clip, with `ref_text` or without it, to be
transcribed) is held to an upload's limits here, before any decoding; it is encoded by codes/serve/voices/uploads.py.
"""

from __future__ import annotations

import base64
import binascii
import math
from dataclasses import dataclass

from codes.common.errors import UserError
from codes.runtime.book import BOOK_FORMATS
from codes.runtime.contract.settings import SWITCHES, TUNABLE, GenerationSettings
from codes.runtime.request import needs_transcript
from codes.runtime.script import CAPTION_SUFFIXES, OVERLAPS
from codes.runtime.script import FORMATS
from codes.serve.core.encode import check_format
from codes.serve.edge.errors import RequestError
from codes.serve.edge.limits import MAX_STEPS, Limits, excerpt, flag
from codes.serve.voices.uploads import check_transcript

MODEL_IDS = ("omnivoice", "tts-1", "tts-1-hd", "gpt-4o-mini-tts")  # OpenAI's names are accepted as aliases
SPEED_RANGE = (0.25, 4.0)
MAX_DURATION = 3600.0  # seconds: a bound for `duration`, far past any speech request
MAX_SETTING = 1e6  # |value| of a float setting: finite is not enough, 1e308 overflows the maths
MAX_SPEAKERS = 64  # speakers one script may declare: each is a voice resolved before any work
SPEECH_FIELDS = {"model", "input", "voice", "instructions", "response_format", "speed", "stream_format",
                 "language", "duration", "seed", "stream", "user", "normalize_text", "ref_audio", "ref_text", "word_timings",
                 *TUNABLE, *SWITCHES}


def base64_length(size: int) -> int:
    """Characters of base64 that `size` bytes take: what a body carrying a ref_audio clip may add."""
    return 4 * ((size + 2) // 3)


def _number(body: dict, name: str, whole: bool = False):
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (whole and not isinstance(value, int)):
        shown = excerpt(value) if isinstance(value, str) else excerpt(repr(value))
        raise RequestError(400, f"{name} must be {'a whole number' if whole else 'a number'}, got {shown}", name)
    if not math.isfinite(value):
        raise RequestError(400, f"{name} must be finite, got {value!r}", name)
    return value


def _text(body: dict, name: str, required: bool = False, limit: int | None = None) -> str | None:
    value = body.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, str):
        got = "" if value is None else f", got {type(value).__name__}"
        raise RequestError(400, f"{name} must be a string{got}", name)
    if limit is not None and len(value) > limit:
        raise RequestError(400, f"{name} is {len(value)} characters ({excerpt(value)}); the limit is {limit}", name)
    return value


def _switch(body: dict, name: str) -> bool | None:
    value = body.get(name)
    if value is None or isinstance(value, bool):
        return value
    shown = excerpt(value) if isinstance(value, str) else excerpt(repr(value))
    raise RequestError(400, f"{name} must be true or false, got {shown}", name)


def _clip(body: dict, limits: Limits) -> tuple[bytes | None, str | None]:
    """(ref_audio's bytes, ref_text), or (None, None): the clip's size is refused before it is decoded."""
    encoded, ref_text = body.get("ref_audio"), _text(body, "ref_text")
    if encoded is None:
        if ref_text is not None:
            raise RequestError(400, "ref_text is the transcript of ref_audio; send the clip as ref_audio too, or "
                                    "leave ref_text out", "ref_text")
        return None, None
    if not isinstance(encoded, str) or not encoded:
        raise RequestError(400, "ref_audio must be a string: the base64 of an audio file (WAV, FLAC, MP3, ...)",
                           "ref_audio")
    if len(encoded) > base64_length(limits.max_upload_bytes):
        raise RequestError(413, f"ref_audio is over {limits.max_upload_bytes} bytes ({flag('max_upload_bytes')}); "
                                "a clone prompt needs only a few seconds: trim it", "ref_audio", "clip_too_large")
    try:
        data = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise RequestError(400, f"ref_audio is not base64 ({excerpt(encoded)}); send the audio file's bytes in "
                                "base64 (no data: prefix)", "ref_audio") from None
    if len(data) > limits.max_upload_bytes:
        raise RequestError(413, f"ref_audio is {len(data)} bytes; the limit is {limits.max_upload_bytes} "
                                f"({flag('max_upload_bytes')}): trim it", "ref_audio", "clip_too_large")
    if needs_transcript(ref_text):  # transcribed where the build can (codes/serve/voices/uploads.py)
        return data, None
    return data, check_transcript(ref_text, limits, "ref_text")


@dataclass
class SpeechParams:
    text: str
    voice: str
    instructions: str | None
    response_format: str
    stream_format: str
    speed: float | None
    language: str | None
    duration: float | None
    seed: int | None
    settings: GenerationSettings
    normalize_text: bool = False  # numbers, dates, currency in words before the text is cut (codes/runtime/text/normalize.py)
    ref_audio: bytes | None = None  # a one-off clone's clip (an audio file's bytes): it wins over `voice`
    ref_text: str | None = None  # that clip's transcript (None: the recogniser's)
    word_timings: bool = False  # each piece's timing also says when each word is heard (where the build aligns)


def _generation(body: dict, defaults: GenerationSettings) -> tuple[GenerationSettings, float | None, int | None]:
    """The generation fields every kind of request takes: (settings over the server's, speed, seed)."""
    speed = _number(body, "speed")
    if speed is not None and not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
        raise RequestError(400, f"speed must be between {SPEED_RANGE[0]} and {SPEED_RANGE[1]}, got {speed}", "speed")
    changes = {name: _number(body, name, whole=kind is int) for name, kind in TUNABLE.items()}
    changes.update({name: _switch(body, name) for name in SWITCHES})
    if changes["num_steps"] is not None and not 1 <= changes["num_steps"] <= MAX_STEPS:
        raise RequestError(400, f"num_steps must be between 1 and {MAX_STEPS}, got {changes['num_steps']}", "num_steps")
    for name, value in changes.items():
        if value is not None and not isinstance(value, bool) and abs(value) > MAX_SETTING:
            raise RequestError(400, f"{name} must be within ±{MAX_SETTING:g}, got {value:g}", name)
    try:
        settings = defaults.replace(**{k: v for k, v in changes.items() if v is not None})
    except UserError as exc:
        raise RequestError(400, str(exc), next((n for n in TUNABLE if str(exc).startswith(n)), None)) from None
    seed = _number(body, "seed", whole=True)
    if seed is not None and not 0 <= seed < 2**63:
        raise RequestError(400, f"seed must be between 0 and 2**63 - 1, got {seed}", "seed")
    return settings, None if speed is None or speed == 1.0 else float(speed), seed


def _unknown_fields(body, known: set[str]) -> None:
    if not isinstance(body, dict):
        raise RequestError(400, "the request body must be a JSON object")
    unknown = sorted(set(body) - known)
    if unknown:
        names = ", ".join(excerpt(str(name)) for name in unknown[:5])
        raise RequestError(400, f"unknown field(s): {names}; known: {', '.join(sorted(known))}",
                           str(unknown[0])[:64])


def parse_speech(body, limits: Limits, defaults: GenerationSettings, streamed_text: bool = False,
                 normalize: bool = False) -> SpeechParams:
    """A speech request's fields (OpenAI's names, and ours) checked against the limits, over the
    server's generation settings (`defaults`) and normalization (`normalize`, --normalize-text); every
    door builds its requests through this. With `streamed_text` the text comes later (SpeechRequest.push)."""
    _unknown_fields(body, SPEECH_FIELDS)
    _text(body, "model", limit=64)
    text = "" if streamed_text else _text(body, "input", required=True, limit=limits.max_input_chars)
    if not streamed_text and not text.strip():
        raise RequestError(400, "input is empty; give at least one word to speak", "input")
    ref_audio, ref_text = _clip(body, limits)
    voice = body.get("voice")
    if isinstance(voice, dict):
        voice = voice.get("id")
    if ref_audio is not None:  # the clip wins: OpenAI's clients send a voice whatever else they send
        voice = voice if isinstance(voice, str) and 0 < len(voice) <= 64 else "ref_audio"
    if not isinstance(voice, str) or not voice:
        raise RequestError(400, "voice is required: a built-in name (alloy, ash, ...), a saved voice's id, or a clip "
                                "as ref_audio", "voice")
    if len(voice) > 64:
        raise RequestError(404, f"unknown voice {excerpt(voice)}: voice ids are at most 64 characters", "voice",
                           "voice_not_found")
    instructions = _text(body, "instructions", limit=limits.max_instructions_chars)
    language = _text(body, "language", limit=limits.max_language_chars)
    response_format = _text(body, "response_format", limit=16) or "mp3"
    try:
        check_format(response_format)
    except UserError as exc:
        raise RequestError(400, str(exc), "response_format") from None
    stream_format = _text(body, "stream_format", limit=16) or "audio"
    if stream_format not in ("audio", "sse"):
        raise RequestError(400, f"stream_format must be 'audio' or 'sse', got {stream_format!r}", "stream_format")
    settings, speed, seed = _generation(body, defaults)
    normalize_text = _switch(body, "normalize_text")
    duration = _number(body, "duration")
    if duration is not None and not 0 < duration <= MAX_DURATION:
        raise RequestError(400, f"duration must be > 0 and at most {MAX_DURATION:g} seconds, got {duration:g}",
                           "duration")
    return SpeechParams(text, voice, instructions, response_format, stream_format, speed, language, duration, seed,
                        settings, normalize if normalize_text is None else normalize_text, ref_audio, ref_text,
                        bool(_switch(body, "word_timings")))


CAPTION_FORMATS = tuple(dict.fromkeys(CAPTION_SUFFIXES.values()))
SCRIPT_FORMATS = FORMATS + BOOK_FORMATS  # a book: its text, or an EPUB's bytes in base64 (docs/books.md)
SCRIPT_STREAM_FORMATS = ("json", "sse")
SCRIPT_FIELDS = {"model", "script", "format", "speakers", "voice", "gap", "overlap", "response_format",
                 "stream_format", "captions", "caption_words", "language", "speed", "seed", "normalize_text", *TUNABLE, *SWITCHES}


@dataclass
class ScriptParams:
    script: str
    script_format: str
    speakers: dict[str, str]  # name -> VOICE (a server voice name, instruct:<attributes> or auto), in order
    gap: float
    overlap: str
    response_format: str
    stream_format: str  # json: one answer with the audio and captions; sse: progress and audio as they come
    captions: str | None
    language: str | None
    speed: float | None
    seed: int | None
    settings: GenerationSettings
    postprocess: bool | None  # what the request said of postprocess_output; None: the script's kind decides
    normalize_text: bool = False
    caption_words: bool = False  # captions and segments word by word (the build's recogniser aligns each piece)


def _choice(body: dict, name: str, choices: tuple[str, ...], default: str | None) -> str | None:
    value = _text(body, name, limit=16)
    if value is None:
        return default
    if value not in choices:
        raise RequestError(400, f"{name} must be one of {', '.join(choices)}, got {excerpt(value)}", name)
    return value


def _captions(body: dict) -> str | None:
    """srt (the default), vtt, or none."""
    kind = _choice(body, "captions", (*CAPTION_FORMATS, "none"), "srt")
    return None if kind == "none" else kind


def parse_script_request(body, limits: Limits, defaults: GenerationSettings, normalize: bool = False) -> ScriptParams:
    """A script request's fields (docs/serving.md, Scripts), checked before any work: the script's own text
    and its bounds are codes/runtime/script's to read (codes/serve/core/lifecycle.py ScriptRequest)."""
    _unknown_fields(body, SCRIPT_FIELDS)
    _text(body, "model", limit=64)
    script = _text(body, "script", required=True)
    if not script.strip():
        raise RequestError(400, "script is empty; send the script's text (a dialogue, SRT, WebVTT or JSONL), or a "
                                "book's (Markdown, HTML, plain text; an EPUB in base64)", "script")
    speakers = body.get("speakers")
    voice = _text(body, "voice", limit=64)
    if speakers is None:  # one voice speaks everything
        speakers = {"default": voice or "alloy"}
    elif voice is not None:
        raise RequestError(400, "voice is the one voice of a script without speakers; with speakers, the first "
                                "declared speaks what no speaker is marked on", "voice")
    if not isinstance(speakers, dict) or not speakers:
        raise RequestError(400, "speakers must be an object of name -> voice, e.g. {\"Alice\": \"nova\", "
                                "\"Bob\": \"instruct:male, low pitch\"}", "speakers")
    if len(speakers) > MAX_SPEAKERS:
        raise RequestError(400, f"a script may declare at most {MAX_SPEAKERS} speakers, got {len(speakers)}",
                           "speakers")
    for name, spoken_by in speakers.items():
        if not isinstance(spoken_by, str) or not 0 < len(spoken_by) <= limits.max_instructions_chars:
            raise RequestError(400, f"speaker {excerpt(str(name))}'s voice must be a voice name, instruct:<attributes> "
                                    f"or auto, of at most {limits.max_instructions_chars} characters", "speakers")
    gap = _number(body, "gap")
    settings, speed, seed = _generation(body, defaults)
    normalize_text = _switch(body, "normalize_text")
    response_format = _text(body, "response_format", limit=16) or "wav"
    try:
        check_format(response_format)
    except UserError as exc:
        raise RequestError(400, str(exc), "response_format") from None
    return ScriptParams(script, _choice(body, "format", SCRIPT_FORMATS, "text"), dict(speakers),
                        0.0 if gap is None else float(gap), _choice(body, "overlap", OVERLAPS, "error"),
                        response_format, _choice(body, "stream_format", SCRIPT_STREAM_FORMATS, "json"),
                        _captions(body),
                        _text(body, "language", limit=limits.max_language_chars), speed, seed, settings,
                        _switch(body, "postprocess_output"), normalize if normalize_text is None else normalize_text,
                        bool(_switch(body, "caption_words")))


def book_bytes(params: ScriptParams) -> bytes | str:
    """A book request's file: an EPUB's bytes from its base64, any other book's text as it came."""
    if params.script_format != "epub":
        return params.script
    try:
        return base64.b64decode(params.script, validate=True)
    except (binascii.Error, ValueError):
        raise UserError("an EPUB is sent as the file's bytes in base64; script is not base64") from None


def design_instructions(body) -> str:
    """POST /v1/audio/voice-design: the chosen vocabulary items ({"items": [...]}) as one instruct, joined as the
    runtime reads it (resolve_instruct: a dialect makes every item Chinese, joined with "，")."""
    from codes.runtime.text.voice_design import resolve_instruct

    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list) or not all(isinstance(item, str) and len(item) <= 64 for item in items) \
            or len(items) > 8:
        raise RequestError(400, 'send {"items": [...]}: up to 8 items of the voice-design vocabulary', "items")
    if not items:
        return ""
    try:  # an item outside the vocabulary, or two of one category, is the runtime's one line
        return resolve_instruct(", ".join(items))
    except UserError as exc:
        raise RequestError(400, str(exc), "items") from None

