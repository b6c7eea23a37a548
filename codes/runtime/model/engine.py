"""Step-level batching: one thread owns the model and runs decoding steps over whatever work is there.

A work item (one utterance, or one sentence of a longer text) joins the running batch at a
decoding-step boundary with its own step counter, schedule, settings and noise generator, and
leaves when its last step is done. The CFG batch is rebuilt from the items chosen for each step,
the cells are scored with each item's own settings and noise, and the reveal is each item's own:
an item's codes do not depend on what else shares its steps, and equal `generate_codes` for the
same request, settings and noise. (On fp32, fp16 and int4 builds exactly; a dynamic int8 graph
quantizes activations with one scale over the whole batch, so there its neighbours move it slightly.)

Latency first (docs/DESIGN.md §scheduling): each step takes the items in order of need, pressing
ones (a request's first chunk, a voice someone waits on, a later chunk that must start now to be
done by its due time, else its listener hears silence) before the rest, each side by when it must
start. So a client that floods the server with new requests delays another's next chunk by at most
the first chunks that were waiting when that chunk had to start (bench/fairness.py). An item not
chosen for a step just waits: its state is its tokens and step counter, so pausing costs nothing.
Beside a pressing item another joins only where batching is nearly free: where the tokens it adds
cost less than a step's fixed cost, by a cost model fitted to the steps this engine ran
(StepCost). On a CPU, where a step's cost is its tokens, pressing items run one after another; on
a device with room to spare they share steps. Items that are not pressing fill the batch up to
max_batch, for throughput.
"""

from __future__ import annotations

import copy
import itertools
import logging
import threading
import time
from collections import deque
from concurrent.futures import CancelledError, Future
from dataclasses import dataclass, field

import numpy as np

from codes.common.errors import UserError
from codes.runtime.contract.settings import GenerationSettings, max_item_frames
from codes.runtime.contract.specs import AUDIO_MASK_ID
from codes.runtime.model.decoding import NoiseSource, RandomNoise, reveal_schedule, reveal_top_k
from codes.runtime.voices.prompt import build_cfg_batch, build_prompt

_SEQUENCE = itertools.count()
logger = logging.getLogger(__name__)


class QueueFull(UserError):
    """More work is waiting or running than the engine takes (--max-queue)."""


class EngineDown(RuntimeError):
    """The engine's thread has died; nothing more will be decoded."""


@dataclass(eq=False)
class WorkItem:
    prompt: np.ndarray  # [8, cond_len] int64: the conditional row, its target cells revealed as decoding goes
    audio_mask: np.ndarray  # [cond_len] bool
    target_len: int
    settings: GenerationSettings
    noise: NoiseSource
    schedule: list[int]
    urgent: bool = False  # someone waits on it for first audio
    due: float | None = None  # perf_counter time its codes are needed by (None: now)
    start_by: float | None = None  # when it must start to be done by `due`, by the engine's cost model
    future: Future = field(default_factory=Future)
    step_index: int = 0
    max_shared: int = 0  # the most items it shared a decoding step with, itself included
    cancelled: bool = False  # set by cancel(); the engine drops it at the next step boundary
    queued_at: float = field(default_factory=time.perf_counter)
    started_at: float | None = None
    finished_at: float | None = None
    order: int = field(default_factory=lambda: next(_SEQUENCE))

    @property
    def tokens(self) -> np.ndarray:
        return self.prompt[:, -self.target_len:]

    def pressing(self, now: float) -> bool:
        """Someone waits on it now: a first chunk, or a later one that must start now to be done by
        its due time (else its listener hears silence), so a flood of new requests cannot stall
        running streams."""
        return self.urgent or (self.start_by is not None and self.start_by <= now)

    def priority(self, now: float) -> tuple:
        """Pressing items first, each side by when it must start (when it came, for a first chunk)."""
        return (not self.pressing(now), self.queued_at if self.start_by is None else self.start_by, self.order)


def step_tokens(items) -> int:
    """Positions a step's backbone runs for these items: conditional rows padded to the longest
    prompt, unconditional rows to the longest target (codes/runtime/model/forward.py)."""
    return len(items) * (max(item.prompt.shape[1] for item in items) + max(item.target_len for item in items))


class StepCost:
    """A step's seconds as fixed + per_token x tokens, fitted by least squares to recent steps.

    Unknown until the steps seen differ enough in size to separate the two terms; `learn=False`
    keeps the terms given.
    """

    def __init__(self, fixed: float | None = None, per_token: float | None = None, learn: bool = True,
                 window: int = 256, spread: float = 1.3):
        self.samples: deque[tuple[int, float]] = deque(maxlen=window)
        self.spread, self.learn = spread, learn
        self.fixed, self.per_token = fixed, per_token

    def observe(self, tokens: int, seconds: float) -> None:
        if not self.learn:
            return
        self.samples.append((tokens, seconds))
        sizes = [t for t, _ in self.samples]
        if len(self.samples) >= 2 and max(sizes) >= self.spread * min(sizes):
            slope, intercept = np.polyfit(np.array(sizes, float), np.array([s for _, s in self.samples]), 1)
            self.per_token, self.fixed = max(float(slope), 0.0), max(float(intercept), 0.0)

    def seconds(self, tokens: int) -> float:
        """A step's expected seconds at `tokens` (unknown: 0)."""
        return 0.0 if self.per_token is None else self.fixed + self.per_token * tokens

    def nearly_free(self, extra_tokens: int) -> bool:
        """Whether adding extra_tokens to a step costs less than a step's fixed cost (unknown: yes)."""
        if self.per_token is None:
            return True
        return self.per_token * extra_tokens <= self.fixed


class StepEngine:
    def __init__(self, tts, max_batch: int = 8, max_queue: int = 64, cost: StepCost | None = None):
        if max_batch < 1 or max_queue < 1:
            raise UserError(f"max batch and max queue must be >= 1, got {max_batch} and {max_queue}")
        self.tts, self.max_batch, self.max_queue = tts, max_batch, max_queue
        self.cost = cost or StepCost()
        self._items: list[WorkItem] = []  # submitted, not finished: waiting, running or paused
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.steps_run = 0
        self.failure: BaseException | None = None  # why the engine's thread died, if it did
        self.last_step: list[WorkItem] = []  # the items of the latest step, in the order they were chosen
        self._running: frozenset[WorkItem] = frozenset()  # the step being run now, if one is

    # --- the client side (any thread) ------------------------------------------------------------

    def submit(self, request, settings: GenerationSettings, noise: NoiseSource, urgent: bool = False,
               due: float | None = None) -> WorkItem:
        """Queue one settled request (short enough for one chunk); it joins at a step boundary.

        urgent: someone waits on it for first audio; due: when its codes are needed (perf_counter).
        """
        if request.target_len > max_item_frames(settings):
            raise UserError("a work item is one chunk: split long text into sentences before submitting it")
        item = self.make_item(request, settings, noise)
        item.urgent, item.due = urgent, due
        if due is not None:  # made alone, it takes its steps at its own size
            item.start_by = due - settings.num_steps * self.cost.seconds(step_tokens([item]))
        with self._wake:
            if self.dead or self._stopping:  # stopped: nothing submitted now would be decoded
                raise EngineDown("the decoding engine has stopped")
            if len(self._items) >= self.max_queue:
                raise QueueFull(f"the server is busy ({self.max_queue} items queued or running); retry shortly")
            self._items.append(item)
            self._wake.notify()
        return item

    def make_item(self, request, settings: GenerationSettings, noise: NoiseSource) -> WorkItem:
        voice = request.voice
        prompt = build_prompt(self.tts.tokenizer, request.text, request.target_len,
                              ref_text=voice.text if voice else None, ref_codes=voice.codes if voice else None,
                              lang=request.lang, instruct=request.instruct, denoise=settings.denoise)
        return WorkItem(prompt.input_ids.copy(), prompt.audio_mask, request.target_len, settings, noise,
                        reveal_schedule(request.target_len, settings.num_steps, settings.t_shift))

    def cancel(self, item: WorkItem) -> None:
        """Take the item out (a client went away, or barged in): at once where it is only waiting, so
        its room in the queue is free now, else at the end of the step it is in."""
        with self._wake:
            item.cancelled = True
            waiting = item in self._items and item not in self._running
            if waiting:
                self._items.remove(item)
            self._wake.notify()
        if waiting:
            _abandon(item)

    @property
    def dead(self) -> bool:
        """Its thread crashed, or ended though never stopped: nothing submitted would be decoded."""
        crashed = self._thread is not None and not self._thread.is_alive() and not self._stopping
        return self.failure is not None or crashed

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

    def warm_up(self, requests) -> None:
        """Run two steps of each list of requests, before serving: the sessions meet real shapes
        (the first runs of a session allocate and are slow) and the cost model gets its first sizes.
        Call before start(); nothing is kept."""
        settings = GenerationSettings(num_steps=2)
        for batch in requests:
            items = [self.make_item(request, settings, RandomNoise(0)) for request in batch]
            self.step(items)
            self._timed_step(items)

    # --- the engine thread ----------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as exc:  # a bug in the engine itself: nothing may wait on it for ever
            with self._wake:
                self.failure = exc
                items, self._items = self._items, []
            for item in items:
                if not item.future.done():
                    item.future.set_exception(EngineDown(f"the decoding engine stopped: {type(exc).__name__}: {exc}"))
            logger.critical("the decoding engine stopped", exc_info=exc)

    def _loop(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and not self._items:
                    self._wake.wait()
                if self._stopping:
                    for item in self._items:
                        _abandon(item)
                    self._items = []
                    return
                chosen = self._choose()
                self._running = frozenset(chosen)
            if chosen:
                outcomes = self._run_step(chosen)
                with self._wake:  # out of the queue before anyone hears, so their room is free
                    self._items = [item for item in self._items if item not in outcomes]
                    self._running = frozenset()
                for item, failure in outcomes.items():
                    if failure is not None:
                        item.future.set_exception(failure)
                    elif not item.future.done():
                        item.future.set_result(item.tokens.copy())

    def _run_step(self, items: list[WorkItem]) -> dict[WorkItem, Exception | None]:
        """One step of `items`: {finished or failed item: its error or None}. A failing step is
        retried item by item, so an error fails only the items that cause it."""
        noises = [copy.deepcopy(item.noise) for item in items]  # what a failed step drew is drawn again
        try:
            return dict.fromkeys(self._timed_step(items))
        except Exception as exc:
            if len(items) == 1:
                return {items[0]: exc}
        outcomes = {}
        for item, noise in zip(items, noises):  # a failed step revealed nothing: each runs it again, alone
            item.noise = noise
            try:
                outcomes.update(dict.fromkeys(self._timed_step([item])))
            except Exception as exc:
                outcomes[item] = exc
        return outcomes

    def _choose(self) -> list[WorkItem]:
        """Drop cancelled items, then pick this step's items in order of need (caller holds the lock)."""
        for item in [i for i in self._items if i.cancelled]:
            self._items.remove(item)
            _abandon(item)
        chosen: list[WorkItem] = []
        now = time.perf_counter()
        for item in sorted(self._items, key=lambda item: item.priority(now)):
            if len(chosen) >= self.max_batch:
                break
            if chosen and chosen[0].pressing(now):  # sorted: any pressing item in the step is first
                if not self.cost.nearly_free(step_tokens([*chosen, item]) - step_tokens(chosen)):
                    continue
            if item.started_at is None:
                if not item.future.set_running_or_notify_cancel():  # cancelled through its future
                    item.cancelled = True
                    continue
                item.started_at = time.perf_counter()
            chosen.append(item)
        self.last_step = chosen
        return chosen

    def _timed_step(self, items: list[WorkItem]) -> list[WorkItem]:
        start = time.perf_counter()
        finished = self.step(items)
        self.cost.observe(step_tokens(items), time.perf_counter() - start)
        self.steps_run += 1
        return finished

    def step(self, items: list[WorkItem]) -> list[WorkItem]:
        """One decoding step of `items`; returns those whose last step it was (their codes: item.tokens)."""
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
        for item in finished:
            item.finished_at = time.perf_counter()
        return finished


def _abandon(item: WorkItem) -> None:
    """Resolve an item that will not finish: cancelled if it never ran, else with CancelledError."""
    if not item.future.cancel() and not item.future.done():
        item.future.set_exception(CancelledError())
