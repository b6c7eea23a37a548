"""Saved voices on disk, and the names every voice answers to: OpenAI's built-in design names, the
saved voices in --voices_dir and the voices imported from --voices-from folders.

Saved voices are the files inference.py --save_voice writes, in one folder: ours (.npz) or upstream's
VoiceClonePrompt.save (.pt, read without torch: codes/runtime/voices/prompt_file.py); an id is a file name
without its suffix and never reaches outside that folder. Imported voices (serve.py --voices-from,
codes/serve/voices/files.py) are offered beside them under their folders' names.
"""

from __future__ import annotations

import contextlib
import fcntl
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from codes.common.errors import UserError
from codes.runtime.request import Voice
from codes.runtime.text.voice_design import resolve_instruct
from codes.runtime.voices.prompt_file import MAX_FILE_BYTES

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
# Pin sentences, shortest first (0.9, 1.5, 2.6 and 4.9 s at the fallback reference's pace): a pin speaks
# the longest that fits its seconds, at that pace, so a reply cloning it is given its usual length.
LOCK_FILE = ".lock"  # in the voices folder: held while a save counts the saved voices and adds one
SAVED_SUFFIXES = (".npz", ".pt")  # ours, then upstream's; a save writes .npz
MAX_ID_CHARS = 64
_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,%d}" % (MAX_ID_CHARS - 1))


def asked_id(text: str) -> str:
    """A voice name as a client sent it, cut to the longest any id can be: what a door looks up or reports."""
    return str(text)[:MAX_ID_CHARS]


def voice_id(name: str) -> str:
    """A saved voice's id from a user-given name: lower case, [a-z0-9_-] only, at most MAX_ID_CHARS characters."""
    cleaned = re.sub(r"[^a-z0-9_-]+", "-", (name or "").strip().lower()).strip("-_")[:MAX_ID_CHARS]
    if not cleaned or not _ID.fullmatch(cleaned):
        raise UserError(f"voice name {name!r} has no usable characters; use letters, digits, '-' or '_'")
    if cleaned in DESIGN_VOICES:
        raise UserError(f"voice name {cleaned!r} is a built-in voice; choose another name")
    return cleaned


class NotDeletable(UserError):
    """A voice this server offers but does not own: a built-in design voice, or one imported read-only (400)."""


class VoiceExists(UserError):
    """A saved voice's id is taken (409)."""


class TooManyVoices(UserError):
    """--max-voices are saved (409)."""


class CloneSource(Protocol):
    """An imported clone's voice: made on the first call (given the model's TTS), then `ready()`;
    `settled()` once made or refused."""

    def __call__(self, tts) -> Voice: ...

    def ready(self) -> Voice | None: ...

    def settled(self) -> bool: ...


@dataclass(frozen=True)
class ImportedVoice:
    """A voice offered from a --voices-from folder (codes/serve/voices/files.py): a design (`instruct`,
    pinned like the built-in ones) or a clone (`clone(tts)` gives its Voice, read or encoded once;
    `clone.ready()` gives it without waiting once it is made)."""

    vid: str
    source: Path  # the voice's folder, only ever read
    instruct: str | None = None
    clone: CloneSource | None = None
    language: str | None = None  # its <language> folder's tag (en_US), which Wyoming's describe lists

    def entry(self) -> dict:
        """Its line in the voice list."""
        entry = ({"id": self.vid, "name": self.vid, "kind": "design", "instruct": self.instruct} if self.instruct
                 else {"id": self.vid, "name": self.vid, "kind": "imported"})
        return {**entry, "language": self.language} if self.language else entry


class VoiceBook:
    """Built-in design voices (pinned on first use), the saved voices in `folder` and the imported ones."""

    def __init__(self, folder: Path, imported: dict[str, ImportedVoice] | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.imported = dict(imported or {})
        self._transcripts: dict[str, tuple[tuple, str | None]] = {}  # id -> (its file's version, its transcript)
        for name, instruct in DESIGN_VOICES.items():
            resolve_instruct(instruct)  # a bad table entry fails at start, not in a request

    def saved_ids(self) -> list[str]:
        return sorted({p.stem for suffix in SAVED_SUFFIXES for p in self.folder.glob(f"*{suffix}")
                       if _ID.fullmatch(p.stem)})

    def listing(self) -> list[dict]:
        saved = self.saved_ids()
        for gone in set(self._transcripts) - set(saved):  # the cache holds no more than the folder
            self._transcripts.pop(gone, None)
        return ([{"id": name, "name": name, "kind": "design", "instruct": instruct}
                 for name, instruct in DESIGN_VOICES.items()]
                + [voice.entry() for voice in self.imported.values()]
                + [{"id": vid, "name": vid, "kind": "saved", "transcript": self.transcript(vid)} for vid in saved])

    def transcript(self, vid: str) -> str | None:
        """A saved voice's transcript (given, or the recogniser's), read once per version of its file;
        None for a file that cannot be read (speaking with it says why)."""
        path = self.saved_path(vid)
        try:
            stat = path.stat() if path is not None else None
        except OSError:
            stat = None
        if stat is None:
            self._transcripts.pop(vid, None)
            return None
        version = (path.name, stat.st_mtime_ns, stat.st_size)
        known = self._transcripts.get(vid)
        if known is None or known[0] != version:
            try:
                text = self.load_saved(vid, path).text
            except UserError:
                text = None
            known = self._transcripts[vid] = (version, text)
        return known[1]

    def imported_status(self) -> dict:
        """For /health: the imported voices, and how many of their clips are still to be encoded or failed."""
        clones = [voice.clone for voice in self.imported.values() if voice.clone is not None]
        failed = sum(1 for clone in clones if clone.settled() and clone.ready() is None)
        return {"imported": len(self.imported), "encoding": sum(1 for clone in clones if not clone.settled()),
                "failed": failed}

    def known(self, most: int = 30) -> str:
        names = [*DESIGN_VOICES, *self.imported, *self.saved_ids()]
        return ", ".join(names[:most]) + (f", ... ({len(names)} in all: GET /v1/audio/voices)" if len(names) > most else "")

    def taken(self, vid: str) -> bool:
        """Whether a new saved voice may not have this id: a saved or an imported voice has it."""
        return vid in self.imported or self.saved_path(vid) is not None

    def saved_path(self, vid: str) -> Path | None:
        """The file of a saved voice id (.npz, else .pt), or None; an id that is not a plain file name is never a path."""
        if not isinstance(vid, str) or not _ID.fullmatch(vid):
            return None
        for suffix in SAVED_SUFFIXES:
            path = self.folder / f"{vid}{suffix}"
            if path.resolve().parent == self.folder.resolve() and path.is_file():
                return path
        return None

    def unknown_voice(self, vid) -> UserError:
        return UserError(f"unknown voice {vid!r}; known voices: {self.known()}")

    def save(self, vid: str, voice: Voice, most: int | None = None) -> None:
        """VoiceExists for an id that is taken; TooManyVoices where `most` are saved already. The count and
        the save hold the folder's lock, so uploads at once (threads, or replicas sharing the folder)
        cannot all pass the count and then all save."""
        path = self.folder / f"{vid}.npz"
        with self._locked():
            if most is not None and len(self.saved_ids()) >= most:
                raise TooManyVoices(f"{most} voices are saved; delete one first")
            try:  # exclusive: two servers on one folder saving one id at once keep the first
                if self.taken(vid):  # an upstream .pt of that name, or an imported voice
                    raise FileExistsError(vid)
                voice.save(path, exclusive=True)
            except FileExistsError:
                raise VoiceExists(f"voice {vid!r} exists; delete it first (DELETE /v1/audio/voices/{vid})") from None

    @contextlib.contextmanager
    def _locked(self):
        """The folder's lock: flock conflicts between any two opens of the file, in one process or many
        (and Linux's NFS client maps it onto POSIX locks, so replicas on other machines take it too)."""
        with open(self.folder / LOCK_FILE, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def delete(self, vid: str) -> bool:
        """Delete a saved voice's files (False: there is none); NotDeletable for every voice it does not own."""
        if vid in DESIGN_VOICES:
            raise NotDeletable(f"{vid!r} is a built-in voice and cannot be deleted")
        if vid in self.imported:
            raise NotDeletable(f"voice {vid!r} is imported from a --voices-from folder, which this server only reads; "
                               "remove it there and restart")
        path = self.saved_path(vid)
        if path is None:
            return False
        while path is not None:  # a .pt that an .npz of the same id hid would speak next
            path.unlink()
            path = self.saved_path(vid)
        return True

    def load_saved(self, vid: str, path: Path) -> Voice:
        """A saved voice's file; a damaged or refused one is a UserError naming the voice, never its path."""
        try:
            with open(path, "rb") as f:
                data = f.read(MAX_FILE_BYTES + 1)  # past it is refused, unread
            return Voice.from_bytes(data, repr(vid))
        except (OSError, UserError) as exc:
            problem = getattr(exc, "problem", "") or "its file is damaged"
            raise UserError(f"saved voice {vid!r} cannot be read ({problem}); delete it "
                            f"(DELETE /v1/audio/voices/{vid}) and upload it again") from None


