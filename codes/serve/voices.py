"""Voices that stay the same: OpenAI's names as pinned voice designs, and saved voices on disk.

A design voice (an instruct) would sound different in every request and every sentence, since each
draws its own speaker. So its first use synthesizes a reference sentence with a fixed seed and keeps
the codes as a clone prompt ("pinned"); every later sentence clones that prompt.
Saved voices are the .npz files inference.py --save_voice writes, in one folder; an id is a file
name without .npz and never reaches outside that folder.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from codes.common.errors import UserError
from codes.runtime.synthesis import Voice
from codes.runtime.voice_design import resolve_instruct

# OpenAI's voice names -> voice-design instructs (items from codes/runtime/data/instruct.json).
DESIGN_VOICES = {
    "alloy": "female, young adult, moderate pitch, american accent",
    "ash": "male, young adult, low pitch, american accent",
    "ballad": "male, middle-aged, moderate pitch, british accent",
    "coral": "female, young adult, high pitch, american accent",
    "echo": "male, middle-aged, moderate pitch, american accent",
    "fable": "male, young adult, moderate pitch, british accent",
    "nova": "female, young adult, moderate pitch, british accent",
    "onyx": "male, middle-aged, very low pitch, american accent",
    "sage": "female, middle-aged, low pitch, american accent",
    "shimmer": "female, teenager, high pitch, american accent",
    "verse": "male, young adult, high pitch, canadian accent",
    "marin": "female, middle-aged, moderate pitch, canadian accent",
    "cedar": "male, elderly, low pitch, american accent",
}
PIN_TEXT = "The quick brown fox jumps over the lazy dog, then rests in the warm afternoon sun."
PIN_SEED = 1234
_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def voice_id(name: str) -> str:
    """A saved voice's id from a user-given name: lower case, [a-z0-9_-] only, at most 64 characters."""
    cleaned = re.sub(r"[^a-z0-9_-]+", "-", (name or "").strip().lower()).strip("-_")[:64]
    if not cleaned or not _ID.fullmatch(cleaned):
        raise UserError(f"voice name {name!r} has no usable characters; use letters, digits, '-' or '_'")
    if cleaned in DESIGN_VOICES:
        raise UserError(f"voice name {cleaned!r} is a built-in voice; choose another name")
    return cleaned


class VoiceBook:
    """Built-in design voices (pinned on first use) and the saved voices in `folder`."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.pinned: dict[str, Voice] = {}  # resolved instruct -> its pinned clone prompt
        self.pin_locks: dict[str, asyncio.Lock] = {}  # one pinning per instruct, however many ask at once
        for name, instruct in DESIGN_VOICES.items():
            resolve_instruct(instruct)  # a bad table entry fails at start, not in a request

    def saved_ids(self) -> list[str]:
        return sorted(p.stem for p in self.folder.glob("*.npz") if _ID.fullmatch(p.stem))

    def listing(self) -> list[dict]:
        return ([{"id": name, "name": name, "kind": "design", "instruct": instruct}
                 for name, instruct in DESIGN_VOICES.items()]
                + [{"id": vid, "name": vid, "kind": "saved"} for vid in self.saved_ids()])

    def known(self) -> str:
        return ", ".join([*DESIGN_VOICES, *self.saved_ids()])

    def saved_path(self, vid: str) -> Path | None:
        """The file of a saved voice id, or None; an id that is not a plain file name is never a path."""
        if not isinstance(vid, str) or not _ID.fullmatch(vid):
            return None
        path = self.folder / f"{vid}.npz"
        if path.resolve().parent != self.folder.resolve() or not path.is_file():
            return None
        return path

    def unknown_voice(self, vid) -> UserError:
        return UserError(f"unknown voice {vid!r}; known voices: {self.known()}")

    def lock_for(self, instruct: str) -> asyncio.Lock:
        return self.pin_locks.setdefault(instruct, asyncio.Lock())

    def save(self, vid: str, voice: Voice) -> None:
        path = self.folder / f"{vid}.npz"
        if path.exists():
            raise UserError(f"voice {vid!r} exists; delete it first (DELETE /v1/audio/voices/{vid})")
        voice.save(path)

    def delete(self, vid: str) -> bool:
        path = self.saved_path(vid)
        if path is None:
            return False
        path.unlink()
        return True
