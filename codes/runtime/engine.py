"""Step-level batching: one thread owns the model and runs decoding steps over whatever work is there.

A work item (one utterance, or one sentence of a longer text) joins the running batch at the next
decoding-step boundary with its own step counter, schedule, settings and noise generator, and
leaves when its last step is done. The CFG batch is rebuilt from the items present at each step,
the cells are scored with each item's own settings and noise, and the reveal is each item's own:
an item's codes do not depend on what else shares its steps, and equal `generate_codes` for the
same request, settings and noise. (On fp32, fp16 and int4 builds exactly; a dynamic int8 graph
quantizes activations with one scale over the whole batch, so there its neighbours move it slightly.)
"""

from __future__ import annotations

import threading
import time
from collections import deque
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field

import numpy as np

from codes.common.errors import UserError
from codes.runtime.decoding import NoiseSource, reveal_schedule, reveal_top_k
from codes.runtime.prompt import build_cfg_batch, build_prompt
from codes.runtime.settings import GenerationSettings
from codes.runtime.specs import AUDIO_MASK_ID, FRAME_RATE


class QueueFull(UserError):
    """More work is waiting or running than the engine takes (--max-queue)."""


@dataclass(eq=False)
class WorkItem:
    prompt: np.ndarray  # [8, cond_len] int64: the conditional row, its target cells revealed as decoding goes
    audio_mask: np.ndarray  # [cond_len] bool
    target_len: int
    settings: GenerationSettings
    noise: NoiseSource
    schedule: list[int]
    future: Future = field(default_factory=Future)
    step_index: int = 0
    max_shared: int = 0  # the most items it shared a decoding step with, itself included
    queued_at: float = field(default_factory=time.perf_counter)
    started_at: float | None = None
    finished_at: float | None = None

    @property
    def tokens(self) -> np.ndarray:
        return self.prompt[:, -self.target_len:]


class StepEngine:
    def __init__(self, tts, max_batch: int = 8, max_queue: int = 64):
        if max_batch < 1 or max_queue < 1:
            raise UserError(f"max batch and max queue must be >= 1, got {max_batch} and {max_queue}")
        self.tts, self.max_batch, self.max_queue = tts, max_batch, max_queue
        self._waiting: deque[WorkItem] = deque()
        self._running: list[WorkItem] = []
        self._cancelled: set[int] = set()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    # --- the client side (any thread) ------------------------------------------------------------

    def submit(self, request, settings: GenerationSettings, noise: NoiseSource) -> WorkItem:
        """Queue one settled request (short enough for one chunk); it joins at the next step."""
        if request.target_len > int(settings.audio_chunk_threshold * FRAME_RATE):
            raise UserError("a work item is one chunk: split long text into sentences before submitting it")
        voice = request.voice
        prompt = build_prompt(self.tts.tokenizer, request.text, request.target_len,
                              ref_text=voice.text if voice else None, ref_codes=voice.codes if voice else None,
                              lang=request.lang, instruct=request.instruct, denoise=settings.denoise)
        item = WorkItem(prompt.input_ids.copy(), prompt.audio_mask, request.target_len, settings, noise,
                        reveal_schedule(request.target_len, settings.num_steps, settings.t_shift))
        with self._wake:
            if len(self._waiting) + len(self._running) >= self.max_queue:
                raise QueueFull(f"the server is busy ({self.max_queue} items queued or running); retry shortly")
            self._waiting.append(item)
            self._wake.notify()
        return item

    def cancel(self, item: WorkItem) -> None:
        """Take the item out at the next step boundary (a client went away)."""
        with self._wake:
            self._cancelled.add(id(item))
            self._wake.notify()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="omnivoice-steps", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._wake:
            self._stopping = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    # --- the engine thread ----------------------------------------------------------------------

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and not (self._waiting or self._running):
                    self._wake.wait()
                if self._stopping:
                    for item in (*self._waiting, *self._running):
                        _abandon(item)
                    return
                self._admit()
            if self._running:
                try:
                    self.step()
                except Exception as exc:  # a failing step fails its items, never the engine
                    for item in self._running:
                        item.future.set_exception(exc)
                    self._running = []

    def _admit(self) -> None:
        """Drop cancelled items, then let waiting ones join up to max_batch (caller holds the lock)."""
        for queue in (self._waiting, self._running):
            for item in [i for i in queue if id(i) in self._cancelled]:
                queue.remove(item)
                self._cancelled.discard(id(item))
                _abandon(item)
        while self._waiting and len(self._running) < self.max_batch:
            item = self._waiting.popleft()
            if item.future.set_running_or_notify_cancel():
                item.started_at = time.perf_counter()
                self._running.append(item)

    def step(self) -> None:
        """One decoding step of every running item; finished items leave with their codes."""
        items = self._running
        target_lens = [item.target_len for item in items]
        batch = build_cfg_batch([(item.prompt, item.audio_mask) for item in items], target_lens)
        reveal_counts = [item.schedule[item.step_index] for item in items]
        noises = [item.noise if count > 0 else None for item, count in zip(items, reveal_counts)]
        scored = self.tts.score_fn([item.settings for item in items])(batch.input_ids, batch, target_lens, noises)
        for item, count, cells in zip(items, reveal_counts, scored):
            item.max_shared = max(item.max_shared, len(items))
            if count > 0:
                item.prompt[:, -item.target_len:] = reveal_top_k(item.tokens, *cells, count, AUDIO_MASK_ID)
            item.step_index += 1
        finished = [item for item in items if item.step_index >= len(item.schedule)]
        self._running = [item for item in items if item not in finished]
        for item in finished:
            item.finished_at = time.perf_counter()
            item.future.set_result(item.tokens.copy())


def _abandon(item: WorkItem) -> None:
    """Resolve an item that will not finish: cancelled if it never ran, else with CancelledError."""
    if not item.future.cancel() and not item.future.done():
        item.future.set_exception(CancelledError())
