"""Voices that stay the same: OpenAI's names as pinned voice designs, and saved voices on disk.

A design voice (an instruct) would sound different in every request and every sentence, since each
draws its own speaker. So it is pinned: a short reference sentence is synthesized once with a fixed
seed and its codes kept as a clone prompt that every later sentence clones. Pins are kept in
`<voices_dir>/pinned/`, one .npz (and a .json saying what it is) per build, instruct and pin
settings, so a restart loads them instead of pinning again; delete the folder to pin anew.
A pin lasts at most --pin-seconds (its sentence is the longest that fits): its tokens ride along in
every step of every sentence that clones it (docs/DESIGN.md §pin-length).
Saved voices are the files inference.py --save_voice writes, in one folder: ours (.npz) or upstream's
VoiceClonePrompt.save (.pt, read without torch: codes/runtime/prompt_file.py); an id is a file name
without its suffix and never reaches outside that folder. Imported voices (serve.py --voices-from,
codes/serve/voice_files.py) are offered beside them under their folders' names. Protocol-neutral:
every server door uses it.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import logging
import re
import threading
import time
from collections import OrderedDict
from concurrent.futures import CancelledError, Executor, Future
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

from codes.common.errors import UserError
from codes.common.fileio import write_json_atomic
from codes.runtime.decoding import RandomNoise
from codes.runtime.prompt_file import MAX_FILE_BYTES
from codes.runtime.duration import paced_frames
from codes.runtime.reference import trim_voice
from codes.runtime.settings import GenerationSettings
from codes.runtime.specs import FRAME_RATE
from codes.runtime.engine import WorkItem
from codes.runtime.synthesis import OmniVoiceOnnx, Request, Voice
from codes.runtime.text import contains_chinese
from codes.runtime.voice_design import resolve_instruct

logger = logging.getLogger("omnivoice.serve")

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
PIN_TEXTS = ("Hi, how are you?",
             "Hello there, how are you?",
             "The quick brown fox jumps over the lazy dog.",
             "The quick brown fox jumps over the lazy dog, then rests in the warm afternoon sun.")
PIN_SEED = 1234
PIN_SECONDS = 1.5  # measured: docs/DESIGN.md §pin-length
PIN_FOLDER = "pinned"
LOCK_FILE = ".lock"  # in the voices folder: held while a save counts the saved voices and adds one
SAVED_SUFFIXES = (".npz", ".pt")  # ours, then upstream's; a save writes .npz
_ID = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


class PinEngine(Protocol):
    """What pinning needs of the loaded model (codes/serve/speech.py LoadedModel): its TTS to settle
    the pin's sentence, and the step engine to run that sentence and to cancel it; and what an imported
    clip needs: the codec's pool, where it is encoded."""

    tts: OmniVoiceOnnx
    decode_pool: Executor

    def submit(self, request: Request, settings: GenerationSettings, noise, urgent: bool = False,
               due: float | None = None) -> WorkItem: ...

    def cancel(self, item: WorkItem) -> None: ...


def voice_id(name: str) -> str:
    """A saved voice's id from a user-given name: lower case, [a-z0-9_-] only, at most 64 characters."""
    cleaned = re.sub(r"[^a-z0-9_-]+", "-", (name or "").strip().lower()).strip("-_")[:64]
    if not cleaned or not _ID.fullmatch(cleaned):
        raise UserError(f"voice name {name!r} has no usable characters; use letters, digits, '-' or '_'")
    if cleaned in DESIGN_VOICES:
        raise UserError(f"voice name {cleaned!r} is a built-in voice; choose another name")
    return cleaned


class VoiceExists(UserError):
    """A saved voice's id is taken (409)."""


class TooManyVoices(UserError):
    """--max-voices are saved (409)."""


class CloneSource(Protocol):
    """An imported clone's voice: made on the first call (given the model's TTS), then `ready()`."""

    def __call__(self, tts) -> Voice: ...

    def ready(self) -> Voice | None: ...


class OneOffSource(Protocol):
    """A request's own clip (codes/serve/voice_uploads.py OneOffClip): encoded for that request, kept nowhere."""

    async def voice(self, model: PinEngine) -> Voice: ...


@dataclass(frozen=True)
class ImportedVoice:
    """A voice offered from a --voices-from folder (codes/serve/voice_files.py): a design (`instruct`,
    pinned like the built-in ones) or a clone (`clone(tts)` gives its Voice, read or encoded once;
    `clone.ready()` gives it without waiting once it is made)."""

    vid: str
    source: Path  # the voice's folder, only ever read
    instruct: str | None = None
    clone: CloneSource | None = None


class VoiceBook:
    """Built-in design voices (pinned on first use), the saved voices in `folder` and the imported ones."""

    def __init__(self, folder: Path, imported: dict[str, ImportedVoice] | None = None):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.imported = dict(imported or {})
        for name, instruct in DESIGN_VOICES.items():
            resolve_instruct(instruct)  # a bad table entry fails at start, not in a request

    def saved_ids(self) -> list[str]:
        return sorted({p.stem for suffix in SAVED_SUFFIXES for p in self.folder.glob(f"*{suffix}")
                       if _ID.fullmatch(p.stem)})

    def listing(self) -> list[dict]:
        return ([{"id": name, "name": name, "kind": "design", "instruct": instruct}
                 for name, instruct in DESIGN_VOICES.items()]
                + [{"id": vid, "name": vid, "kind": "design", "instruct": voice.instruct} if voice.instruct
                   else {"id": vid, "name": vid, "kind": "imported"} for vid, voice in self.imported.items()]
                + [{"id": vid, "name": vid, "kind": "saved"} for vid in self.saved_ids()])

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
        if vid in self.imported:
            raise UserError(f"voice {vid!r} is imported from a --voices-from folder, which this server only reads; "
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


def canonical_instruct(instruct: str) -> str:
    """A resolved instruct with its items in one order, so "a, b" and "b, a" are one pinned voice."""
    separator = "，" if "，" in instruct else ", "
    return separator.join(sorted(instruct.split(separator)))


@dataclass(frozen=True)
class PinSettings:
    """What a pin is made with; part of its key on disk."""

    seconds: float = PIN_SECONDS
    seed: int = PIN_SEED
    num_steps: int = GenerationSettings().num_steps

    @property
    def text(self) -> str:
        fitting = [t for t in PIN_TEXTS if paced_frames(t) <= self.seconds * FRAME_RATE]
        return fitting[-1] if fitting else PIN_TEXTS[0]


class DesignPins:
    """Pinned design voices: in memory (the `max_pinned` most recently used), on disk under `folder`,
    or being synthesized (once each, however many ask at once, and only while someone waits).
    Thread-safe: the server's loop and its loading thread both ask."""

    def __init__(self, folder: Path, build_id: str, settings: PinSettings = PinSettings(), max_pinned: int = 64):
        if not settings.seconds > 0:
            raise UserError(f"--pin-seconds must be > 0, got {settings.seconds}")
        self.folder, self.build_id, self.settings, self.max_pinned = Path(folder), build_id, settings, max_pinned
        self._pins: OrderedDict[str, Future] = OrderedDict()  # canonical instruct -> Future of its Voice
        self._making: dict[str, object] = {}  # canonical instruct -> its engine work item, while it is made
        self._waiters: dict[str, int] = {}
        self._lock = threading.Lock()
        self.synthesized = 0  # pins made by synthesis (a restart that finds them on disk makes none)
        self.loaded = 0  # pins read from disk

    def path(self, instruct: str) -> Path:
        key = json.dumps({"build": self.build_id, "instruct": instruct, "text": self.settings.text,
                          **asdict(self.settings)}, sort_keys=True, ensure_ascii=False)
        digest = hashlib.sha256(key.encode()).hexdigest()[:16]
        slug = re.sub(r"[^a-z0-9]+", "-", instruct.lower()).strip("-")[:48] or "voice"
        return self.folder / f"{slug}-{digest}.npz"

    def get(self, model: PinEngine, instruct: str) -> Future:
        """A Future of the pinned Voice for a resolved instruct; synthesized through `model` if new."""
        instruct = canonical_instruct(instruct)
        with self._lock:
            future = self._pins.get(instruct)
            if future is not None and not _failed(future):
                self._pins.move_to_end(instruct)
                return future
            future = self._pins[instruct] = Future()
            self._forget_oldest()
        path = self.path(instruct)
        if path.is_file():
            try:
                voice = Voice.load(path)
            except UserError as exc:
                logger.warning("pinning %r again: %s", instruct, exc)
            else:
                self.loaded += 1
                logger.info("loaded pinned voice design %r from %s", instruct, path)
                future.set_result(voice)
                return future
        self._synthesize(model, instruct, path, future)
        return future

    async def wait(self, model: PinEngine, instruct: str) -> Voice:
        """The pinned Voice, for a request; a pinning that every request waiting on it has left stops."""
        instruct = canonical_instruct(instruct)
        future = self.get(model, instruct)
        with self._lock:
            self._waiters[instruct] = self._waiters.get(instruct, 0) + 1
        try:
            # shield: one request that times out or leaves does not take the pinning down for the others
            return await asyncio.shield(asyncio.wrap_future(future))
        finally:
            with self._lock:
                self._waiters[instruct] -= 1
                item = self._making.get(instruct) if self._waiters[instruct] == 0 and not future.done() else None
                if not self._waiters[instruct]:
                    del self._waiters[instruct]
            if item is not None:
                model.cancel(item)

    def _forget_oldest(self) -> None:
        """Keep at most max_pinned in memory, dropping the least recently used that are done (caller locks)."""
        for instruct in list(self._pins):
            if len(self._pins) <= self.max_pinned:
                return
            if self._pins[instruct].done() and instruct not in self._waiters:
                del self._pins[instruct]

    def _synthesize(self, model: PinEngine, instruct: str, path: Path, future: Future) -> None:
        text, started = self.settings.text, time.perf_counter()
        try:
            request = model.tts.settle([text], "en", instruct, None, num_frames=paced_frames(text))[0]
            item = model.submit(request, GenerationSettings(num_steps=self.settings.num_steps),
                                RandomNoise(self.settings.seed), urgent=True)
        except Exception as exc:
            future.set_exception(exc)
            return
        with self._lock:
            self._making[instruct] = item

        def done(finished: Future) -> None:
            with self._lock:
                self._making.pop(instruct, None)
            if _failed(finished):
                error = None if finished.cancelled() else finished.exception()
                if error is None or isinstance(error, CancelledError):  # every waiter left, or shutdown
                    error = UserError(f"pinning {instruct!r} stopped: no request waits for it")
                future.set_exception(error)
                return
            voice = Voice(finished.result(), text, None)
            try:
                self.folder.mkdir(parents=True, exist_ok=True)
                voice.save(path, exclusive=True)
                write_json_atomic(path.with_suffix(".json"), {"instruct": instruct, "build": self.build_id,
                                                              "text": text, **asdict(self.settings)})
            except FileExistsError:  # another server on this folder pinned it first: all speak with its pin
                voice = self._theirs(path, voice)
            except OSError as exc:  # the pin still serves this process
                logger.warning("cannot keep pinned voice %s (%s)", path, exc.strerror)
            self.synthesized += 1
            logger.info("pinned voice design %r (%d frames in %.1f s) -> %s", instruct, voice.codes.shape[1],
                        time.perf_counter() - started, path)
            future.set_result(voice)

        item.future.add_done_callback(done)

    @staticmethod
    def _theirs(path: Path, ours: Voice) -> Voice:
        try:
            return Voice.load(path)
        except UserError as exc:
            logger.warning("keeping this server's own pin: %s", exc)
            return ours


def _failed(future: Future) -> bool:
    return future.done() and (future.cancelled() or future.exception() is not None)


class UnknownVoice(UserError):
    """No design voice and no saved voice by that name (404)."""


class Voices:
    """Voice resolution for every door (HTTP, and any other): a design voice by name or instruct,
    pinned; or a saved voice, trimmed to max_ref_seconds where asked."""

    def __init__(self, book: VoiceBook, pins: DesignPins, max_ref_seconds: float | None = None):
        if max_ref_seconds is not None and not max_ref_seconds > 0:
            raise UserError(f"--max-ref-seconds must be > 0, got {max_ref_seconds}")
        self.book, self.pins, self.max_ref_seconds = book, pins, max_ref_seconds

    def design_instruct(self, name: str, instructions: str | None, text: str = "") -> str:
        return resolve_instruct(instructions or self.design_of(name), use_zh=contains_chinese(text))

    def design_of(self, name: str) -> str | None:
        """A design voice's instruct (built in, or imported from an instruct.txt), or None."""
        imported = self.book.imported.get(name)
        return DESIGN_VOICES.get(name) or (imported.instruct if imported is not None else None)

    def preload(self, model: PinEngine, names: list[str]) -> list[Voice]:
        """Pin these design voices now (blocking): each from disk, or synthesized."""
        futures = [self.pins.get(model, self.design_instruct(name, None)) for name in names]
        return [future.result() for future in futures]

    async def resolve(self, model: PinEngine, name: str, instructions: str | None, text: str,
                      clip: OneOffSource | None = None) -> tuple[Voice | None, str | None]:
        """(clone prompt, instruct) for a request; UserError for an unknown voice. A request's own clip
        wins over its voice name (OpenAI's clients always send one); instructions then steer the clone."""
        if clip is not None:
            return await clip.voice(model), (instructions or None)
        if self.design_of(name) is not None:
            return await self.pins.wait(model, self.design_instruct(name, instructions, text)), None
        voice = await self.saved(model, name)
        if self.max_ref_seconds is not None:
            voice = trim_voice(voice, self.max_ref_seconds)
        return voice, (instructions or None)

    async def whole(self, model: PinEngine, name: str) -> Voice:
        """Any voice's clone prompt as it is (a design voice's pin, untrimmed), for an export."""
        if self.design_of(name) is not None:
            return await self.pins.wait(model, self.design_instruct(name, None))
        return await self.saved(model, name)

    async def saved(self, model: PinEngine, name: str) -> Voice:
        """A saved or imported clone voice, untrimmed; UnknownVoice, or a UserError naming a damaged one."""
        loop = asyncio.get_running_loop()
        imported = self.book.imported.get(name)
        if imported is not None:  # made once, reading or encoding on the codec's pool; later uses wait for nothing
            return imported.clone.ready() or await loop.run_in_executor(model.decode_pool, imported.clone, model.tts)
        path = await loop.run_in_executor(None, self.book.saved_path, name)
        if path is None:  # the message lists the folder: read off the loop too
            raise UnknownVoice(str(await loop.run_in_executor(None, self.book.unknown_voice, name)))
        return await loop.run_in_executor(None, self.book.load_saved, name, path)
