"""A script planned: each segment a settled Request with its settings, seed and place on the timeline,
and the run that hands its work items out as their inputs become known.

plan_script is pure given the model's tokenizer-free settle (OmniVoiceOnnx.settle): every segment's text,
language and instruct are checked here, before any work. ScriptRun then says what may be decoded now
(take_jobs) and what a finished work item unlocks (finish_job); any step engine drives it: the runtime's
(render.py) or the server's (LoadedModel.submit each Job's request, settings and noise; feed the codes
back with the WorkItem's noise).

Dependencies, and why (docs/DESIGN.md §scripts):
  - a segment too long for one work item is upstream's chunks, one after another: each chunk continues
    the segment's noise, and without a voice the first chunk is the reference of the rest;
  - a designed or auto speaker's first segment is generated first; its first chunk's codes and text
    become the reference of the speaker's later segments, which are settled (their length estimated
    from that reference) only then. Jobs that make a reference are handed out first.
Segment i draws its noise from seed + i, so under deterministic settings it equals what it gives alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from collections.abc import Mapping

import numpy as np

from codes.common.errors import UserError
from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.contract.specs import SAMPLE_RATE
from codes.runtime.model.decoding import NoiseSource
from codes.runtime.request import (Request, Voice, chunk_request, first_chunk_voice, is_long, item_noises,
                                   long_form_chunks)
from codes.runtime.script.segments import Break, Script, Segment, check_break
from codes.runtime.script.speakers import SpeakerVoice

ORDERS = ("timeline", "length")


@dataclass(frozen=True)
class Piece:
    """One segment, planned."""

    index: int  # its place in the script (timeline order): its noise is seed + index
    segment: Segment
    speaker: str
    voice: SpeakerVoice
    instruct: str | None  # the segment's, else its designed speaker's
    settings: GenerationSettings  # the run's, with this piece's post-processing
    request: Request | None  # settled; None until its speaker's reference exists
    reference_from: int | None  # the piece whose first chunk is its speaker's reference (itself, for the first)
    speech_start: int | None  # timed: the sample its speech starts at
    silence_before: int  # untimed: samples of silence between the piece before (or the track's start) and this one

    @property
    def makes_reference(self) -> bool:
        return self.reference_from == self.index


@dataclass(frozen=True)
class SegmentDefaults:
    """What a segment without its own gets (inference.py's --language, --speed, --normalize_text)."""

    language: str | None = None
    speed: float | None = None
    normalize_text: bool = False


@dataclass(frozen=True)
class ScriptPlan:
    pieces: tuple[Piece, ...]
    timed: bool
    source: str
    speakers: tuple[str, ...]  # those who speak, in declared order: the stems
    seed: int | None
    defaults: SegmentDefaults
    pad: int  # samples of silence each piece has on each side (pad_duration)
    silence_after: int  # untimed: after the last piece
    min_length: int  # timed: the last cue's end, which the track lasts at least until
    sample_rate: int = SAMPLE_RATE
    warnings: tuple[str, ...] = ()


def seconds_to_samples(seconds: float, sample_rate: int = SAMPLE_RATE) -> int:
    return round(seconds * sample_rate)


def settle_piece(tts, defaults: SegmentDefaults, segment: Segment, voice: Voice | None, instruct: str | None,
                 source: str) -> Request:
    """The segment's Request, as `inference.py --text SEGMENT` with its options would settle it."""
    try:
        return tts.settle([segment.text], segment.language or defaults.language, instruct, voice, segment.duration,
                          segment.speed or defaults.speed, None, defaults.normalize_text)[0]
    except UserError as exc:
        raise UserError(f"{source} {segment.where}: {exc}") from None


def plan_script(script: Script, voices: Mapping[str, SpeakerVoice], tts, settings: GenerationSettings | None = None,
                seed: int | None = None, gap: float = 0.0, postprocess: bool | None = None,
                language: str | None = None, speed: float | None = None, normalize_text: bool = False) -> ScriptPlan:
    """Place every segment. voices: each speaker's, in declared order (the first speaks unmarked segments).
    postprocess None: upstream's post-processing on text pieces as settings say, off for cues (it trims
    silence and would move speech off its slot); True or False: for every piece."""
    settings = settings or GenerationSettings()
    if not voices:
        raise UserError("a script needs at least one speaker")
    default = next(iter(voices))
    if script.timed and gap:
        raise UserError("--gap is for text scripts and JSONL without times; cues keep their own times")
    gap_samples = seconds_to_samples(check_break(gap, "--gap"))
    post = (not script.timed and settings.postprocess_output) if postprocess is None else postprocess
    piece_settings = settings.replace(postprocess_output=post)
    defaults = SegmentDefaults(language, speed, normalize_text)
    pieces: list[Piece] = []
    first_of: dict[str, int] = {}
    silence, previous_speaker = 0, None
    for item in script.items:
        if isinstance(item, Break):
            silence += seconds_to_samples(item.seconds)
            continue
        speaker = item.speaker if item.speaker is not None else default
        if speaker not in voices:
            raise UserError(f"{script.source} {item.where}: unknown speaker {speaker!r}; "
                            f"declare it with --speaker {speaker}=VOICE")
        voice = voices[speaker]
        instruct = item.instruct if item.instruct is not None else voice.instruct
        index = len(pieces)
        reference_from = None
        if voice.made_from_first:
            reference_from = first_of.setdefault(speaker, index)
        # A later piece of a made speaker is settled again once the reference exists; checked now.
        request = settle_piece(tts, defaults, item, voice.voice, instruct, script.source)
        if reference_from is not None and reference_from != index:
            request = None
        if previous_speaker is not None and previous_speaker != speaker:
            silence += gap_samples
        pieces.append(Piece(index, item, speaker, voice, instruct, piece_settings, request, reference_from,
                            seconds_to_samples(item.start) if script.timed else None,
                            0 if script.timed else silence))
        silence, previous_speaker = 0, speaker
    if not pieces:
        raise UserError(f"{script.source} holds no text to speak")
    speaking = {piece.speaker for piece in pieces}
    min_length = max((seconds_to_samples(p.segment.start + p.segment.duration) for p in pieces), default=0) \
        if script.timed else 0
    return ScriptPlan(tuple(pieces), script.timed, script.source, tuple(n for n in voices if n in speaking), seed,
                      defaults, int(settings.pad_duration * SAMPLE_RATE),
                      0 if script.timed else silence, min_length, SAMPLE_RATE, script.warnings)


@dataclass(eq=False)
class Job:
    """One work item: a piece's chunk (chunk 0 of a short piece is all of it), or, taken whole, the piece with
    all its chunks (chunk None: the request is the piece's, to speak at once with OmniVoiceOnnx.generate_codes)."""

    piece: int
    chunk: int | None
    request: Request
    settings: GenerationSettings
    noise: NoiseSource

    @property
    def step_size(self) -> int:
        """About the positions a step runs for it (engine.step_tokens: its prompt and its target again),
        its text's tokens left out: what it costs a step it shares with others of its size."""
        voice = self.request.voice
        return (voice.codes.shape[1] if voice else 0) + 2 * self.request.target_len

    @property
    def fits_a_work_item(self) -> bool:
        """Whether a step engine takes it (StepEngine.submit); a longer chunk (a long sentence without a
        stop, a long cue) is decoded whole another way (OmniVoiceOnnx.generate_whole), as upstream does."""
        return self.chunk is not None and not is_long(self.request, self.settings)


@dataclass(frozen=True)
class FinishedPiece:
    """A piece whose codes are all made: decode with OmniVoiceOnnx.decode(chunks, ref_rms, settings), which
    cross-fades a long piece's chunks as upstream does (the server's LoadedModel.decode takes one array: a
    chunked piece needs the list)."""

    index: int
    chunks: list[np.ndarray]
    ref_rms: float | None
    settings: GenerationSettings


@dataclass
class _Progress:
    request: Request | None
    noise: NoiseSource
    chunk_texts: list[str] | None = None  # a long piece's chunks
    chunks: list[np.ndarray] = field(default_factory=list)
    out: bool = False  # a job of it is being decoded
    reused: bool = False  # its audio came from a ledger or a store: nothing of it is decoded

    @property
    def total(self) -> int | None:
        if self.request is None:
            return None
        return len(self.chunk_texts) if self.chunk_texts is not None else 1


class ScriptRun:
    """Which work items of a plan are ready, and what each finished one unlocks. Not thread-safe: one
    driver calls it."""

    def __init__(self, plan: ScriptPlan, tts):
        self.plan, self.tts = plan, tts
        noises = item_noises(plan.seed, len(plan.pieces))
        self._state = [_Progress(None, noise) for noise in noises]
        for piece in plan.pieces:
            if piece.request is not None:
                self._settled(piece.index, piece.request)
        self.made_voices: dict[str, Voice] = {}  # each made speaker's reference, once made
        self.pieces_done = 0

    def _settled(self, index: int, request: Request) -> None:
        state = self._state[index]
        state.request = request
        piece = self.plan.pieces[index]
        if is_long(request, piece.settings):
            state.chunk_texts = long_form_chunks(request, piece.settings)

    def _job(self, index: int) -> Job:
        piece, state = self.plan.pieces[index], self._state[index]
        chunk = len(state.chunks)
        request = state.request
        if state.chunk_texts is not None:
            reference = request.voice
            if reference is None and chunk > 0:
                reference = first_chunk_voice(state.chunks[0], state.chunk_texts[0])
            request = chunk_request(request, state.chunk_texts[chunk], reference)
        return Job(index, chunk, request, piece.settings, state.noise)

    def take_jobs(self, limit: int | None = None, order: str = "timeline", whole: bool = False) -> list[Job]:
        """Jobs whose inputs are known, not handed out before: those that make a speaker's reference first,
        then in timeline order (for a listener: the mix comes out soonest), or longest first ("length": jobs
        that start together share their steps, and a step pads every item to its longest, so like sizes
        together waste least: on the 3-minute dialogue of bench/script_bench.py, 18% more positions than the
        segments alone, against 52% in timeline order). Each piece has at most one job out (its chunks go in turn).
        whole: each job a whole piece, for a driver whose workers speak a piece at once (the Ray one)."""
        if order not in ORDERS:
            raise UserError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
        ready = [self._whole_job(p.index) if whole else self._job(p.index) for p, s in zip(self.plan.pieces, self._state)
                 if s.request is not None and not s.out and not s.reused and len(s.chunks) < s.total
                 and not (whole and s.chunks)]
        pieces = self.plan.pieces
        if order == "timeline":
            ready.sort(key=lambda job: (not pieces[job.piece].makes_reference, job.piece))
        else:
            ready.sort(key=lambda job: (not pieces[job.piece].makes_reference, -job.step_size, job.piece))
        jobs = ready[:limit]
        for job in jobs:
            self._state[job.piece].out = True
        return jobs

    def _whole_job(self, index: int) -> Job:
        state = self._state[index]
        return Job(index, None, state.request, self.plan.pieces[index].settings, state.noise)

    def finish_job(self, job: Job, codes: np.ndarray | list[np.ndarray],
                   noise: NoiseSource | None = None) -> list[FinishedPiece]:
        """Record a job's codes (a whole piece's: the list of its chunks'); returns the pieces this finishes.
        noise: the source the engine finished with (WorkItem.noise, a copy where it ran a step again), which
        the piece's next chunk continues."""
        piece, state = self.plan.pieces[job.piece], self._state[job.piece]
        state.out = False
        if noise is not None:
            state.noise = noise
        state.chunks.extend(codes if job.chunk is None else [codes])
        if job.chunk in (0, None) and piece.makes_reference:
            first_text = state.chunk_texts[0] if state.chunk_texts is not None else state.request.text
            self._reference_made(piece, first_chunk_voice(state.chunks[0], first_text))
        if len(state.chunks) < state.total:
            return []
        return [self._finished(job.piece)]

    def _reference_made(self, piece: Piece, reference: Voice) -> None:
        """A made speaker's reference exists: its later pieces are settled on it."""
        self.made_voices[piece.speaker] = reference
        for later in self.plan.pieces:
            if later.reference_from == piece.index and later.index != piece.index:
                request = settle_piece(self.tts, self.plan.defaults, later.segment, reference, later.instruct,
                                       self.plan.source)
                self._settled(later.index, request)

    def reuse(self, index: int, reference: Voice | None = None) -> None:
        """A piece whose audio is kept from an earlier run: nothing of it is decoded; where it made its
        speaker's reference, `reference` is that reference, and the speaker's later pieces settle on it.
        Pieces are reused in plan order (a reference before the pieces made from it)."""
        piece, state = self.plan.pieces[index], self._state[index]
        if state.request is None or state.out or state.chunks or state.reused:
            raise ValueError(f"piece {index} cannot be reused now")
        if piece.makes_reference:
            if reference is None:
                raise ValueError(f"piece {index} makes its speaker's reference; reuse it with that reference")
            self._reference_made(piece, reference)
        state.reused = True
        self.pieces_done += 1

    def reference_of(self, index: int) -> Voice | None:
        """The reference a finished piece made (None: it made none), to keep with its audio."""
        piece = self.plan.pieces[index]
        return self.made_voices.get(piece.speaker) if piece.makes_reference else None

    def _finished(self, index: int) -> FinishedPiece:
        piece, state = self.plan.pieces[index], self._state[index]
        self.pieces_done += 1
        voice = state.request.voice
        return FinishedPiece(piece.index, state.chunks, voice.rms if voice else None, piece.settings)

    @property
    def done(self) -> bool:
        return self.pieces_done == len(self.plan.pieces)
