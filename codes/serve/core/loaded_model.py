"""The loaded model every request shares: the model, its step engine and the codec's pools. It sits
below the service's state (codes/serve/core/state.py holds one), so the serve wing's imports run downhill
from the doors to it.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.contract.specs import FRAME_RATE, SAMPLE_RATE
from codes.runtime.model.engine import StepCost, StepEngine, WorkItem
from codes.runtime.request import Request
from codes.runtime.synthesis import OmniVoiceOnnx
from codes.serve.core.encode import FORMATS, encode_whole


class LoadedModel:
    """The model, its step engine and the codec's decoding pool, shared by every request."""

    def __init__(self, tts: OmniVoiceOnnx, max_batch: int, max_queue: int,
                 step_cost: tuple[float, float] | None = None):
        self.tts = tts
        # step_cost pins the scheduler's cost model (fixed, per token); None fits it to this machine's steps
        cost = None if step_cost is None else StepCost(*step_cost, learn=False)
        self.engine = StepEngine(tts, max_batch=max_batch, max_queue=max_queue, cost=cost)
        # One codec worker: on a small CPU the decoder competes with the steps; it never blocks the loop.
        self.decode_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="omnivoice-codec")
        self.encode_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="omnivoice-encode")  # mp3, opus, ...
        # Word timings on a worker of their own, so a chunk's audio never waits for words. Chunks that come while
        # it aligns wait for it, then share the next pass's windows (30 s of audio an encoder pass): no chunk
        # waits for another that is not yet there (docs/DESIGN.md §word-timings).
        self.align_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="omnivoice-align")
        self._align_lock = threading.Lock()
        self._align_waiting: list[tuple] = []  # (piece, future, loop), in arrival order
        self._aligning = False
        self.outstanding: set[WorkItem] = set()  # submitted, not yet finished or cancelled
        self.word_timings = tts.has_word_timings  # the recogniser can time words (read once: it reads a manifest)

    def start(self) -> None:
        self.engine.start()

    def stop(self) -> None:
        self.engine.stop()
        for pool in (self.decode_pool, self.encode_pool, self.align_pool):
            pool.shutdown(wait=False, cancel_futures=True)

    def warm_up(self) -> None:
        """Before serving: steps at two sizes (warm sessions, and the engine's cost model), a codec
        decode and an encode longer than a first chunk, so the first request pays no first-run cost
        (ONNX Runtime allocates on a session's first runs at a size). Before start()."""
        short = Request("Hello.", None, None, None, FRAME_RATE, 1.0)
        longer = Request("Hello there, how are you today?", None, None, None, 4 * FRAME_RATE, 1.0)
        self.engine.warm_up([[short], [longer, longer]])
        wav = self.tts.decode([np.zeros((8, 6 * FRAME_RATE), np.int64)], None, GenerationSettings())
        for fmt in FORMATS:
            encode_whole(wav, fmt, SAMPLE_RATE)

    def submit(self, request: Request, settings: GenerationSettings, noise, urgent: bool = False,
               due: float | None = None) -> WorkItem:
        item = self.engine.submit(request, settings, noise, urgent=urgent, due=due)
        self.outstanding.add(item)
        item.future.add_done_callback(lambda _: self.outstanding.discard(item))
        return item

    def cancel(self, item: WorkItem) -> None:
        if not item.future.done():
            self.engine.cancel(item)

    async def codes(self, item: WorkItem) -> np.ndarray:
        return await asyncio.wrap_future(item.future)

    def words(self, wav: np.ndarray, text: str, language: str | None) -> asyncio.Future:
        """A chunk's words [{"word", "start", "end"}] (seconds from its start), aligned on the align worker with
        the chunks waiting beside it (where word_timings: a build without it keeps chunk timings)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        with self._align_lock:
            self._align_waiting.append(((wav, text, language, None), future, loop))
            idle, self._aligning = not self._aligning, True
        if idle:
            self.align_pool.submit(self._align_waiting_chunks)
        return future

    def _align_waiting_chunks(self) -> None:
        """The align worker: every chunk waiting, in shared windows, until none waits."""
        while True:
            with self._align_lock:
                batch, self._align_waiting = self._align_waiting, []
                if not batch:
                    self._aligning = False
                    return
            try:
                results = [(words, None) for words in self.tts.align_pieces([piece for piece, _, _ in batch])]
            except Exception:  # one chunk's failure (say, too short to align) is its own: each alone
                results = [self._align_alone(piece) for piece, _, _ in batch]
            for (_, future, loop), (words, error) in zip(batch, results):
                loop.call_soon_threadsafe(_settle, future, words, error)

    def _align_alone(self, piece: tuple) -> tuple[list | None, Exception | None]:
        try:
            return self.tts.align_pieces([piece])[0], None
        except Exception as exc:
            return None, exc

    async def decode(self, codes: np.ndarray | list[np.ndarray], ref_rms, settings: GenerationSettings) -> np.ndarray:
        """Codes [8, T] (or a long text's chunks, cross-faded as upstream joins them) to post-processed audio."""
        chunks = codes if isinstance(codes, list) else [codes]
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.decode_pool, self.tts.decode, chunks, ref_rms, settings)


def _settle(future: asyncio.Future, words: list | None, error: Exception | None) -> None:
    if future.done():  # the request that asked is gone
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(words)
