"""Who speaks a script: `NAME=VOICE` declarations, and the voice each speaker resolves to.

VOICE is one of
    me.npz, me.pt, ref.rvq     a voice file (ours, upstream's VoiceClonePrompt.save, wyoming-piper's): Voice.load
    me.wav (.flac, .ogg, .mp3, ...) or clip:PATH
                               a reference clip, transcribed by the build's recogniser (optimize.py --include-asr);
                               PATH|What the clip says. gives its transcript instead
    instruct:female, low pitch a designed voice
    auto                       a voice the model picks
A designed or auto speaker's voice is made once per script: its first segment is spoken with the instruct
(or none), and that segment's codes and text become the speaker's reference for the rest (upstream's
long-form rule, voices.voice.first_chunk_voice). The server resolves its own voice names and hands planning
SpeakerVoice objects; parse_voice(..., paths=False) reads a request's VOICE without touching files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from codes.common.errors import UserError
from codes.runtime.request import Voice
from codes.runtime.script.text_input import check_name
from codes.runtime.text.voice_design import resolve_instruct

DEFAULT_SPEAKER = "default"  # the one speaker of a script declared without any: an auto voice
CLIP_SUFFIXES = frozenset({".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3", ".m4a", ".aac", ".aif", ".aiff", ".webm"})
KINDS = ("file", "clip", "instruct", "auto", "name")


@dataclass(frozen=True)
class VoiceSpec:
    """A VOICE as written: kind (KINDS), its value (a path, attributes or a name) and a clip's transcript."""

    kind: str
    value: str | None = None
    transcript: str | None = None


@dataclass(frozen=True)
class SpeakerVoice:
    """A speaker resolved: a clone prompt, or None for one made from the speaker's first segment, designed
    by `instruct` (None: auto)."""

    voice: Voice | None = None
    instruct: str | None = None

    @property
    def made_from_first(self) -> bool:
        return self.voice is None


def parse_voice(text: str, paths: bool = True) -> VoiceSpec:
    """One VOICE. With paths False (a server's request), anything not instruct:/auto is a voice name."""
    text = text.strip()
    if text == "auto":
        return VoiceSpec("auto")
    if text.startswith("instruct:"):
        attributes = text[len("instruct:"):].strip()
        if not attributes:
            raise UserError("instruct: needs attributes, e.g. instruct:female, low pitch (or use auto)")
        return VoiceSpec("instruct", attributes)
    if not text:
        raise UserError("a speaker's voice is empty; give a voice file, a clip, instruct:<attributes> or auto")
    if not paths:
        return VoiceSpec("name", text)
    clip = text.startswith("clip:")
    path, _, transcript = text[len("clip:"):].partition("|") if clip else text.partition("|")
    if clip or Path(path).suffix.lower() in CLIP_SUFFIXES:
        return VoiceSpec("clip", path.strip(), transcript.strip() or None)
    if transcript:
        raise UserError(f"{text!r}: a transcript (|...) goes with a clip, not a voice file")
    return VoiceSpec("file", text)


def parse_speaker(text: str, paths: bool = True) -> tuple[str, VoiceSpec]:
    """`NAME=VOICE` -> (name, VoiceSpec)."""
    name, equals, voice = text.partition("=")
    if not equals:
        raise UserError(f"--speaker {text!r} needs NAME=VOICE, e.g. Alice=alice.npz or Bob=instruct:male, low pitch")
    return check_name(name), parse_voice(voice, paths)


def parse_speakers(declarations, paths: bool = True) -> dict[str, VoiceSpec]:
    """Repeated `NAME=VOICE` declarations, in order (the first is the default speaker); a name twice is refused."""
    speakers: dict[str, VoiceSpec] = {}
    for declaration in declarations:
        name, spec = parse_speaker(declaration, paths)
        if name.casefold() in {known.casefold() for known in speakers}:
            raise UserError(f"speaker {name!r} is declared twice; declare each speaker once")
        speakers[name] = spec
    return speakers


def check_instruct(name: str, instruct: str | None) -> str | None:
    try:
        resolve_instruct(instruct)
    except UserError as exc:
        raise UserError(f"speaker {name}: {exc}") from None
    return instruct


def resolve_voice(name: str, spec: VoiceSpec | Voice | SpeakerVoice | str, tts=None,
                  preprocess_prompt: bool = True) -> SpeakerVoice:
    """A speaker's voice: a file read, a clip encoded (with `tts`), a design checked. Server names are the
    server's to resolve (its resolver gives a Voice)."""
    if isinstance(spec, SpeakerVoice):
        return SpeakerVoice(spec.voice, check_instruct(name, spec.instruct))
    if isinstance(spec, Voice):
        return SpeakerVoice(spec)
    if isinstance(spec, str):
        spec = parse_voice(spec)
    if spec.kind == "auto":
        return SpeakerVoice()
    if spec.kind == "instruct":
        return SpeakerVoice(None, check_instruct(name, spec.value))
    if spec.kind == "file":
        try:
            return SpeakerVoice(Voice.load(spec.value))
        except UserError as exc:
            raise UserError(f"speaker {name}: {exc}") from None
    if spec.kind == "clip":
        if not Path(spec.value).is_file():
            raise UserError(f"speaker {name}: clip {spec.value} not found; give an audio file")
        try:
            return SpeakerVoice(tts.create_voice(spec.value, spec.transcript, preprocess_prompt))
        except UserError as exc:
            raise UserError(f"speaker {name}: {exc}") from None
    raise UserError(f"speaker {name}: voice {spec.value!r} is a server voice name; this door reads voice files")


def resolve_speakers(specs: Mapping[str, VoiceSpec | Voice | SpeakerVoice | str], tts=None,
                     preprocess_prompt: bool = True) -> dict[str, SpeakerVoice]:
    """Each declared speaker's voice, in order; none declared: one auto speaker, DEFAULT_SPEAKER.
    Files and designs first, then clips (which load the codec), so a bad file fails before any encoding."""
    if not specs:
        return {DEFAULT_SPEAKER: SpeakerVoice()}
    specs = {check_name(name): parse_voice(spec) if isinstance(spec, str) else spec for name, spec in specs.items()}
    names = list(specs)
    kind = {name: spec.kind if isinstance(spec, VoiceSpec) else "" for name, spec in specs.items()}
    resolved = {name: resolve_voice(name, specs[name], tts, preprocess_prompt)
                for name in names if kind[name] != "clip"}
    resolved.update({name: resolve_voice(name, specs[name], tts, preprocess_prompt)
                     for name in names if kind[name] == "clip"})
    return {name: resolved[name] for name in names}
