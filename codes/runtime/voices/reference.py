"""Shortening a clone prompt: a reference's tokens ride along in every decoding step of every
sentence that clones it, so a shorter one makes every step cheaper (docs/DESIGN.md §pin-length)."""

from __future__ import annotations

import re

from codes.common.errors import UserError
from codes.runtime.contract.specs import FRAME_RATE
from codes.runtime.text.chunks import clauses
from codes.runtime.text.duration import text_weight
from codes.runtime.voices.voice import Voice


def trim_voice(voice: Voice, max_seconds: float) -> Voice:
    """The voice's first `max_seconds`, at most, with the words spoken in them.

    Codes carry no word timings, so the cut assumes an even speaking rate: the transcript is cut
    at the last clause end (else word end) whose share of the spoken weight fits, and the codes
    at the same share. An approximation, which is why it is only done when asked for.
    """
    frames = voice.codes.shape[1]
    max_frames = int(max_seconds * FRAME_RATE)
    if frames <= max_frames:
        return voice
    total = text_weight(voice.text)
    if max_frames < 1 or total <= 0:
        raise UserError(f"cannot trim voice to {max_seconds:g} s; give --max-ref-seconds of at least 1")

    def fitting(ends: list[int]) -> int | None:
        fit = [end for end in ends if text_weight(voice.text[:end]) / total * frames <= max_frames]
        return fit[-1] if fit else None

    clause_ends = _ends(clauses(voice.text))
    word_ends = [match.end() for match in re.finditer(r"\S+", voice.text)]
    end = fitting(clause_ends)
    word_end = fitting(word_ends)
    if end is None or (word_end is not None and text_weight(voice.text[:end]) < 0.5 * text_weight(voice.text[:word_end])):
        end = word_end  # no clause end keeps at least half of what a word end keeps
    if end is None:
        raise UserError(f"the voice's first word is longer than {max_seconds:g} s; raise --max-ref-seconds")
    keep = max(1, round(text_weight(voice.text[:end]) / total * frames))
    return Voice(voice.codes[:, :keep].copy(), voice.text[:end].strip(), voice.rms)


def _ends(pieces: list[str]) -> list[int]:
    ends, position = [], 0
    for piece in pieces:
        position += len(piece)
        ends.append(len(piece.rstrip()) + position - len(piece))
    return ends
