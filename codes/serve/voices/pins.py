"""Design voices pinned: OpenAI's names (and imported instruct.txt folders) as voices that stay the same.

A design voice (an instruct) would sound different in every request and every sentence, since each
draws its own speaker. So it is pinned: a short reference sentence is synthesized once with a fixed
seed and its codes kept as a clone prompt that every later sentence clones. Pins are kept in
`<voices_dir>/pinned/`, one .npz (and a .json saying what it is) per build, instruct and pin
settings, so a restart loads them instead of pinning again; delete the folder to pin anew.
A pin lasts at most --pin-seconds (its sentence is the longest that fits): its tokens ride along in
every step of every sentence that clones it (docs/DESIGN.md §pin-length).
"""

from __future__ import annotations

import asyncio
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
from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.contract.specs import FRAME_RATE
from codes.runtime.model.decoding import RandomNoise
from codes.runtime.model.engine import WorkItem
from codes.runtime.request import Request, Voice
from codes.runtime.synthesis import OmniVoiceOnnx
from codes.runtime.text.duration import paced_frames

logger = logging.getLogger("omnivoice.serve")

# Pin sentences, shortest first (0.9, 1.5, 2.6 and 4.9 s at the fallback reference's pace): a pin speaks
# the longest that fits its seconds, at that pace, so a reply cloning it is given its usual length.
PIN_TEXTS = ("Hi, how are you?",
             "Hello there, how are you?",
             "The quick brown fox jumps over the lazy dog.",
             "The quick brown fox jumps over the lazy dog, then rests in the warm afternoon sun.")
PIN_SEED = 1234
PIN_SECONDS = 1.5  # measured: docs/DESIGN.md §pin-length
PIN_FOLDER = "pinned"


class PinEngine(Protocol):
    """What pinning needs of the loaded model (codes/serve/core/loaded_model.py LoadedModel): its TTS to settle
    the pin's sentence, and the step engine to run that sentence and to cancel it; and what an imported
    clip needs: the codec's pool, where it is encoded."""

    tts: OmniVoiceOnnx
    decode_pool: Executor

    def submit(self, request: Request, settings: GenerationSettings, noise, urgent: bool = False,
               due: float | None = None) -> WorkItem: ...

    def cancel(self, item: WorkItem) -> None: ...


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

