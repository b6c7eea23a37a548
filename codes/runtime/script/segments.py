"""The script model every door shares: segments (who says what, with optional timing) and breaks.

A Script is what a parser makes of a file (codes/runtime/script/parse.py, subtitles.py) and what the
planner places on a timeline (plan.py). Two kinds:
  - untimed (a text script, JSONL without times): pieces follow one another, with the breaks' and the
    gap's exact silence between them;
  - timed (SRT, WebVTT, JSONL with "start"): each segment is a cue spoken in its own slot, its speech
    starting at its start time.
Bounds a server puts on a script are checked by check_bounds before any work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from codes.common.errors import UserError
from codes.runtime.contract.specs import FRAME_RATE
from codes.runtime.text.duration import estimate_target_tokens, frames_for_duration

# The longest break (and --gap) a script may ask for: a longer silence is a mistake (a unit, a stray zero),
# and a track made of it is not speech.
MAX_BREAK_SECONDS = 60.0
# A cue whose text needs more than this many times the model's natural pace to fit (its length at the
# natural pace over the cue's) is named in a warning; it is spoken that fast, never cut.
MAX_PACE = 2.0


@dataclass(frozen=True)
class Segment:
    """One piece of speech: who says it, what, and how; where it came from, for errors."""

    text: str
    speaker: str | None = None  # a declared speaker's name; None: the default speaker
    language: str | None = None
    instruct: str | None = None
    speed: float | None = None
    duration: float | None = None  # exact length in seconds (a cue's length)
    start: float | None = None  # seconds on the timeline (timed scripts only)
    where: str = ""  # "line 3", "cue 4 (line 12)"


@dataclass(frozen=True)
class Break:
    """Exact silence between the pieces around it (untimed scripts)."""

    seconds: float
    where: str = ""


@dataclass(frozen=True)
class Script:
    items: tuple[Segment | Break, ...]
    timed: bool = False
    source: str = "script"  # what errors call the file
    warnings: tuple[str, ...] = field(default=())  # found while parsing: spoken anyway, never cut

    @property
    def segments(self) -> list[Segment]:
        return [item for item in self.items if isinstance(item, Segment)]

    def speakers(self) -> list[str | None]:
        """The speakers in order of first appearance (None: the default one)."""
        return list(dict.fromkeys(segment.speaker for segment in self.segments))


@dataclass(frozen=True)
class ScriptBounds:
    """What a door accepts (None: no bound). The server's flags fill these."""

    max_segments: int | None = None
    max_characters: int | None = None
    max_seconds: float | None = None


def natural_seconds(segment: Segment) -> float:
    """How long a segment lasts: its duration, else its length at the model's natural pace (no voice)."""
    if segment.duration is not None:
        return segment.duration
    frames = estimate_target_tokens(segment.text, None, None, segment.speed or 1.0)
    return frames / FRAME_RATE


def script_seconds(script: Script) -> float:
    """The track's length: a timed script's last cue end; an untimed one's segments at their natural pace
    (an estimate: a voice changes the pace) plus its breaks."""
    if script.timed:
        return max((s.start + s.duration for s in script.segments), default=0.0)
    return sum(item.seconds if isinstance(item, Break) else natural_seconds(item) for item in script.items)


def check_bounds(script: Script, bounds: ScriptBounds) -> None:
    """A one-line UserError naming the first bound the script is over."""
    segments = script.segments
    if bounds.max_segments is not None and len(segments) > bounds.max_segments:
        raise UserError(f"{script.source} has {len(segments)} segments, over the limit of {bounds.max_segments}; "
                        "split it into several scripts")
    characters = sum(len(s.text) for s in segments)
    if bounds.max_characters is not None and characters > bounds.max_characters:
        raise UserError(f"{script.source} has {characters} characters, over the limit of {bounds.max_characters}; "
                        "split it into several scripts")
    seconds = script_seconds(script)
    if bounds.max_seconds is not None and seconds > bounds.max_seconds:
        raise UserError(f"{script.source} lasts about {seconds:.1f} s, over the limit of {bounds.max_seconds:g} s; "
                        "split it into several scripts")


def check_break(seconds: float, where: str) -> float:
    """A break's or gap's length, refused where it is not a number of seconds in [0, MAX_BREAK_SECONDS]."""
    if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not math.isfinite(seconds) or seconds < 0:
        raise UserError(f"{where}: a pause must be a number of seconds >= 0, got {seconds!r}")
    if seconds > MAX_BREAK_SECONDS:
        raise UserError(f"{where}: a pause of {seconds:g} s is over the limit of {MAX_BREAK_SECONDS:g} s; "
                        "give a shorter one")
    return float(seconds)


def pace(text: str, duration: float) -> float:
    """How many times faster than its natural pace (no voice) a text must be spoken to last `duration`."""
    return estimate_target_tokens(text, None, None) / frames_for_duration(duration)


def pace_warning(segment: Segment, source: str) -> str | None:
    """The warning for a segment too short for its text (pace over MAX_PACE), or None."""
    if segment.duration is None:
        return None
    ratio = pace(segment.text, segment.duration)
    if ratio <= MAX_PACE:
        return None
    return (f"{source} {segment.where}: {len(segment.text)} characters in {segment.duration:g} s is "
            f"{ratio:.1f}x the natural pace (limit {MAX_PACE:g}x, {len(segment.text) / segment.duration:.1f} "
            "characters/s); it is spoken that fast, not cut")
