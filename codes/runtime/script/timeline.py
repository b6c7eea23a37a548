"""A planned script's audio put together: pieces placed to the sample, the mix handed out in timeline
order as pieces arrive, then the stems and the captions.

Where a piece goes (docs/scripts.md, "Timing"):
  - untimed: right after the piece before, with exactly its silence_before (breaks, and the gap where the
    speaker changes) between them; each piece as inference.py writes it, its 0.1 s pads included;
  - timed: its speech (what follows its leading pad) starts at speech_start; the pads fall into the
    silence around it (a leading pad before the track's start is dropped: it is silence). The track lasts
    at least until the last cue's end.
Every sample is a sum over speakers of each speaker's pieces, in one order everywhere, so the stems sum to
the mix exactly and a block handed out early equals the same samples of the finished mix.

Incremental (for a server streaming the mix): add(index, wav) returns the samples that no piece still to
come can touch, in order; finish() the whole, once every piece is in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from codes.runtime.request import Voice
from codes.runtime.script.plan import ScriptPlan


@dataclass(frozen=True)
class Caption:
    """One segment as spoken: its speech's first sample and the sample after its last, on the track, and its
    text as written. words: [{"word", "start", "end"}] with start and end in samples on the same track, where
    align_captions timed them (codes/runtime/script/words.py; () where the text had nothing to align); None:
    segment level."""

    index: int
    speaker: str
    text: str
    start: int
    end: int
    words: tuple[dict, ...] | None = None


@dataclass
class RenderedScript:
    audio: np.ndarray  # float32, the mix
    sample_rate: int
    stems: dict[str, np.ndarray]  # one track per speaker, as long as the mix; they sum to it
    captions: list[Caption]
    offsets: list[int]  # each piece's first sample on the track (its leading pad's)
    voices: dict[str, Voice] = field(default_factory=dict)  # each designed or auto speaker's reference
    steps: int = 0  # decoding steps the engine ran for it (fewer than the segments' steps where they shared)
    # Each piece's audio as decoded and placed at its offset (the mix may hold others over it: trimmed or mixed
    # cues, a pad over the cue before): what its words are aligned on.
    pieces: list[np.ndarray] = field(default_factory=list)
    spoken: int = 0  # pieces spoken by this run
    reused: int = 0  # pieces whose audio an earlier run kept (a ledger's, a store's)


def speech_span(offset: int, length: int, pad: int) -> tuple[int, int]:
    """Where a piece's speech lies on the track: its first sample after the leading pad and the sample after
    its last before the trailing one (a piece that post-processing left nothing of: an empty span mid-piece)."""
    if length >= 2 * pad:
        return offset + pad, offset + length - pad
    return offset + length // 2, offset + length // 2


def utterance_caption(text: str, length: int, pad: int, speaker: str) -> Caption:
    """A single utterance's caption (inference.py --text): a one-segment track, its speech within its pads."""
    return Caption(0, speaker, text, *speech_span(0, length, pad))


class Timeline:
    def __init__(self, plan: ScriptPlan):
        self.plan = plan
        self.wavs: list[np.ndarray | None] = [None] * len(plan.pieces)
        self.offsets: list[int | None] = [p.speech_start - plan.pad if plan.timed else None for p in plan.pieces]
        self.emitted = 0  # samples of the mix handed out

    @property
    def complete(self) -> bool:
        return all(wav is not None for wav in self.wavs)

    def _place(self) -> None:
        """Untimed: each piece starts where the one before ends, plus its silence; known once that one is in."""
        if self.plan.timed:
            return
        end = 0
        for index, piece in enumerate(self.plan.pieces):
            if self.offsets[index] is None:
                self.offsets[index] = end + piece.silence_before
            if self.wavs[index] is None:
                return
            end = self.offsets[index] + len(self.wavs[index])

    def length(self) -> int:
        """The track's length in samples (every piece in)."""
        ends = [offset + len(wav) for offset, wav in zip(self.offsets, self.wavs)]
        if self.plan.timed:
            return max(self.plan.min_length, *ends)
        return ends[-1] + self.plan.silence_after

    def _final_until(self) -> int:
        """The first sample a piece still to come may touch (all in: the track's end)."""
        if self.complete:
            return self.length()
        return min(max(0, offset) for offset, wav in zip(self.offsets, self.wavs) if wav is None and offset is not None)

    def add(self, index: int, wav: np.ndarray) -> np.ndarray:
        """A piece's audio in; returns the mix's samples now final (maybe none), after those returned before."""
        if self.wavs[index] is not None:
            raise ValueError(f"piece {index} was added already")
        self.wavs[index] = np.asarray(wav, dtype=np.float32)
        self._place()
        until = self._final_until()
        block = self._render(self.emitted, until)[0] if until > self.emitted else np.zeros(0, np.float32)
        self.emitted = max(self.emitted, until)
        return block

    def _render(self, lo: int, hi: int) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(mix, stems) over samples [lo, hi), from the pieces in: each stem its speaker's pieces in order,
        the mix the stems in speaker order."""
        stems = {name: np.zeros(hi - lo, np.float32) for name in self.plan.speakers}
        for piece, offset, wav in zip(self.plan.pieces, self.offsets, self.wavs):
            if wav is None or offset is None:  # not in, or not placed yet (untimed: beyond what is final)
                continue
            first, last = max(lo, offset), min(hi, offset + len(wav))
            if first < last:
                stems[piece.speaker][first - lo:last - lo] += wav[first - offset:last - offset]
        mix = np.zeros(hi - lo, np.float32)
        for name in self.plan.speakers:
            mix += stems[name]
        return mix, stems

    def captions(self) -> list[Caption]:
        return [Caption(piece.index, piece.speaker, piece.segment.text, *speech_span(offset, len(wav), self.plan.pad))
                for piece, offset, wav in zip(self.plan.pieces, self.offsets, self.wavs)]

    def finish(self, voices: dict[str, Voice] | None = None, steps: int = 0) -> RenderedScript:
        if not self.complete:
            missing = [i for i, wav in enumerate(self.wavs) if wav is None]
            raise ValueError(f"pieces {missing} are not in yet")
        mix, stems = self._render(0, self.length())
        return RenderedScript(mix, self.plan.sample_rate, stems, self.captions(), list(self.offsets), dict(voices or {}),
                              steps, list(self.wavs))
