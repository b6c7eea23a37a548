"""How many audio frames to generate for a text: upstream's rule-based estimate.

Each character has a phonetic weight by script (a Latin letter = 1.0, a CJK
character = 3.0, ...; upstream's table in codes/runtime/data/duration_weights.json).
The reference (or "Nice to meet you." = 25 frames without one) gives the
speaking rate in weight per frame; the target's weight divided by that rate is
its length, boosted along a power curve below 50 frames.
"""

from __future__ import annotations

import bisect
import unicodedata
from functools import lru_cache

from codes.runtime.contract.specs import FRAME_RATE
from codes.runtime.data import load_table

_TABLE = load_table("duration_weights")
SCRIPT_WEIGHTS: dict[str, float] = _TABLE["weights"]
# (last code point of a block, script), ascending: bisect finds a character's block.
_BLOCK_ENDS = [end for end, _ in _TABLE["ranges"]]
_BLOCK_SCRIPTS = [script for _, script in _TABLE["ranges"]]

FALLBACK_REF_TEXT = "Nice to meet you."
FALLBACK_REF_FRAMES = 25
SHORT_FRAMES = 50  # below this many frames, the estimate is boosted
BOOST_STRENGTH = 3.0
_ARABIC_TATWEEL = 0x0640  # a stretching mark, not a sound


@lru_cache(maxsize=4096)
def char_weight(char: str) -> float:
    """Speaking time of one character relative to a Latin letter."""
    code = ord(char)
    if 65 <= code <= 90 or 97 <= code <= 122:
        return SCRIPT_WEIGHTS["latin"]
    if code == 32:
        return SCRIPT_WEIGHTS["space"]
    if code == _ARABIC_TATWEEL:
        return SCRIPT_WEIGHTS["mark"]
    category = unicodedata.category(char)
    if category[0] == "M":
        return SCRIPT_WEIGHTS["mark"]
    if category[0] in "PS":
        return SCRIPT_WEIGHTS["punctuation"]
    if category[0] == "Z":
        return SCRIPT_WEIGHTS["space"]
    if category[0] == "N":
        return SCRIPT_WEIGHTS["digit"]
    block = bisect.bisect_left(_BLOCK_ENDS, code)
    if block < len(_BLOCK_ENDS):
        return SCRIPT_WEIGHTS.get(_BLOCK_SCRIPTS[block], SCRIPT_WEIGHTS["default"])
    if code > 0x20000:  # CJK extensions B and later
        return SCRIPT_WEIGHTS["cjk"]
    return SCRIPT_WEIGHTS["default"]


def text_weight(text: str) -> float:
    return sum(char_weight(char) for char in text)


def estimate_frames(text: str, ref_text: str, ref_frames: float) -> float:
    """Frames `text` takes when spoken at the rate `ref_text` took `ref_frames` (unrounded).

    0.0 when the reference has no length or no weight.
    """
    if ref_frames <= 0 or not ref_text:
        return 0.0
    ref_weight = text_weight(ref_text)
    if ref_weight == 0:
        return 0.0
    weight_per_frame = ref_weight / ref_frames
    frames = text_weight(text) / weight_per_frame
    if frames < SHORT_FRAMES:
        # Short utterances come out too short on a linear rate: lift them.
        return SHORT_FRAMES * (frames / SHORT_FRAMES) ** (1.0 / BOOST_STRENGTH)
    return frames


def estimate_target_tokens(
    text: str, ref_text: str | None, num_ref_audio_tokens: int | None, speed: float = 1.0
) -> int:
    """Target length in frames (at least 1); `speed` > 1 shortens it, <= 0 is ignored as upstream does."""
    if num_ref_audio_tokens is None or not ref_text:
        ref_text, num_ref_audio_tokens = FALLBACK_REF_TEXT, FALLBACK_REF_FRAMES
    frames = estimate_frames(text, ref_text, num_ref_audio_tokens)
    if speed > 0 and speed != 1.0:
        frames = frames / speed
    return max(1, int(frames))


def paced_frames(text: str) -> int:
    """Frames `text` takes at the fallback reference's pace, with no short-utterance boost: a clone
    prompt this long gives a text cloning it the length it would have without one (at least 1)."""
    return max(1, round(text_weight(text) * FALLBACK_REF_FRAMES / text_weight(FALLBACK_REF_TEXT)))


def frames_for_duration(duration: float, frame_rate: int = FRAME_RATE) -> int:
    """Target length for an explicit duration in seconds (at least one frame)."""
    return max(1, int(duration * frame_rate))


def resolve_target_len(
    text: str,
    ref_text: str | None,
    num_ref_audio_tokens: int | None,
    speed: float | None = None,
    duration: float | None = None,
    frame_rate: int = FRAME_RATE,
) -> tuple[int, float]:
    """(target_len, speed) for one item, as upstream's `_preprocess_all` settles them.

    `duration` overrides `speed`; the speed returned is then the ratio of the
    plain estimate to the forced length, which chunked generation uses to
    estimate each chunk's length.
    """
    if duration is not None:
        estimate = estimate_target_tokens(text, ref_text, num_ref_audio_tokens, speed=1.0)
        target_len = frames_for_duration(duration, frame_rate)
        return target_len, estimate / target_len
    speed = 1.0 if speed is None else float(speed)
    return estimate_target_tokens(text, ref_text, num_ref_audio_tokens, speed=speed), speed
