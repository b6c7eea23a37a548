"""What each piece's audio depends on: its fingerprint, so a re-run speaks only what changed.

A piece's fingerprint covers what its audio is made from (docs/scripts.md, "Editing and re-running"): its
text, language, instruct, duration and speed; its voice's content (a voice file's codes and transcript, not
its name); every generation setting; its noise (seed + index, or none: unseeded); and the build. A made
speaker's later pieces name the fingerprint of the piece their reference comes from instead of a voice, so
a change to a designed speaker's first segment changes all of that speaker's pieces.
"""

from __future__ import annotations

import hashlib

import numpy as np

from codes.common.journal import fingerprint
from codes.runtime.request import Voice


def voice_key(voice: Voice) -> str:
    """A voice by its content: two files with the same codes, transcript and level are one voice."""
    digest = hashlib.sha256(np.ascontiguousarray(voice.codes, dtype=np.int64).tobytes())
    return fingerprint(digest.hexdigest(), voice.text, voice.rms)


def piece_fingerprints(plan, build: str) -> list[str]:
    """Each piece's fingerprint, in plan order (pure: no file is read)."""
    prints: list[str] = []
    for piece in plan.pieces:
        segment, defaults = piece.segment, plan.defaults
        if piece.voice.voice is not None:
            voice = {"clone": voice_key(piece.voice.voice)}
        elif piece.makes_reference:
            voice = {"made": piece.voice.instruct}
        else:
            voice = {"reference_from": prints[piece.reference_from]}
        prints.append(fingerprint({
            "text": segment.text, "language": segment.language or defaults.language, "instruct": piece.instruct,
            "duration": segment.duration, "speed": segment.speed or defaults.speed,
            "normalize_text": defaults.normalize_text, "voice": voice, "settings": piece.settings.to_dict(),
            "noise": None if plan.seed is None else plan.seed + piece.index, "build": build,
            "sample_rate": plan.sample_rate}))
    return prints
