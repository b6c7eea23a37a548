"""A script's segments as work items on the server's engine, its track out in timeline order as it becomes
final (codes/serve/core/lifecycle.py ScriptRequest owns when it starts and ends).

The plan (codes/runtime/script/plan.py) says which work items may go now: a designed or auto speaker's
first segment before its later ones, a long segment's chunks one after another. Up to --max-batch of a
script's items are in the engine at once, none urgent: a script is bulk work, so a speech request's first
chunk, which someone waits on, goes ahead of it in every step (docs/DESIGN.md §scheduling), and the script's
items fill the rest of the batch. Each finished piece is decoded on the codec's pool and placed
(codes/runtime/script/timeline.py); the mix's samples no later piece can touch are handed out at once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import CancelledError
from dataclasses import dataclass, field, replace

import numpy as np

from codes.runtime.book import chapter_spans
from codes.runtime.contract.specs import SAMPLE_RATE
from codes.runtime.model.engine import QueueFull, WorkItem
from codes.runtime.script import (Assembly, Job, RenderedScript, ScriptPlan, ScriptRun, StoredPiece, align_captions,
                                  caption_text)
from codes.serve.core.loaded_model import LoadedModel
from codes.serve.core.sentences import QUEUE_RETRY_S, request_log, since
from codes.serve.edge.errors import StreamFailed
from codes.serve.edge.limits import flag

logger = logging.getLogger("omnivoice.serve")


@dataclass(frozen=True)
class ScriptProgress:
    """Where a script stands after a piece finished: pieces done of all, and the mix's samples now final."""

    done: int
    total: int
    audio: np.ndarray  # float32, 24 kHz: the track's next samples, after those handed out before
    start: int  # samples of the track before them


@dataclass(kw_only=True)
class ScriptStream:
    """A script's work items and its track, and what its log line reports."""

    model: LoadedModel
    max_batch: int
    received_at: float
    deadline: float
    request_id: int = 0
    door: str = "http"
    replica: str | None = None
    options: dict = field(default_factory=dict)
    caption_words: bool = False  # once every piece is in, each caption's words aligned (on the align worker)
    plan: ScriptPlan | None = None  # set by start(), once the script is read and its voices resolved
    status: str = "ok"
    reason: str | None = None
    finished: bool = False
    rendered: RenderedScript | None = None  # the whole track, its stems and captions, once every piece is in
    first_audio_at: float | None = None
    samples_out: int = 0
    placed: int = 0  # pieces decoded and on the track

    def __post_init__(self):
        self.run: ScriptRun | None = None
        self.assembly: Assembly | None = None
        self.blocks: list[np.ndarray] = []  # the mix's final samples the assembly handed out, not yet yielded
        self.waiting: dict[asyncio.Future, tuple[Job, WorkItem]] = {}  # in the engine
        self.held: list[Job] = []  # taken from the plan, not yet in the engine (its queue was full)

    def start(self, plan: ScriptPlan, kept: dict[int, StoredPiece] | None = None, keep=None) -> None:
        """kept: pieces a submission of this script kept (placed first, spoken by nobody); keep(index, piece):
        each piece spoken, to keep for the next."""
        self.plan = plan
        self.run = ScriptRun(plan, self.model.tts)
        self.assembly = Assembly(self.run, kept, keep, None, self.blocks.append)

    def left(self) -> float:
        return max(self.deadline - time.perf_counter(), 0.0)

    def _submit_ready(self) -> None:
        room = self.max_batch - len(self.waiting) - len(self.held)
        if room > 0:
            self.held.extend(self.run.take_jobs(room, order="timeline"))
        while self.held:
            job = self.held[0]
            if not job.fits_a_work_item:
                segment = self.plan.pieces[job.piece].segment
                raise StreamFailed(f"{self.plan.source} {segment.where}: a piece of it lasts over "
                                   f"{job.settings.audio_chunk_threshold:g} s without a sentence end the server could "
                                   "cut at; split it", server_side=False)
            try:
                item = self.model.submit(job.request, job.settings, job.noise)
            except QueueFull:  # the engine is full of other work: tried again when something finishes
                return
            self.held.pop(0)
            self.waiting[asyncio.wrap_future(item.future)] = (job, item)

    async def progress(self):
        """A ScriptProgress each time a piece is placed, in the order pieces finish; then `rendered` is set.
        StreamFailed when a piece cannot be made, or the request runs past --script-seconds."""
        total = len(self.plan.pieces)

        def from_placed() -> ScriptProgress:
            """The pieces placed so far, and the samples that made final, as one step of progress."""
            block = np.concatenate(self.blocks) if self.blocks else np.zeros(0, np.float32)
            self.blocks.clear()
            self.placed = self.run.pieces_done
            if self.first_audio_at is None and len(block):
                self.first_audio_at = time.perf_counter()
            start, self.samples_out = self.samples_out, self.samples_out + len(block)
            return ScriptProgress(self.placed, total, block, start)

        if self.assembly.reused:
            yield from_placed()
        self._submit_ready()
        while not self.run.done:
            if not self.waiting:
                await asyncio.sleep(QUEUE_RETRY_S)  # every item waits for room in the engine's queue
                self._check_deadline()
                self._submit_ready()
                continue
            done, _ = await asyncio.wait(self.waiting, timeout=self.left(), return_when=asyncio.FIRST_COMPLETED)
            self._check_deadline()
            finished = []
            for waiter in done:
                job, item = self.waiting.pop(waiter)
                finished += self.run.finish_job(job, self._codes(waiter, job), item.noise)
            self._submit_ready()  # before decoding: the engine steps on while the codec runs
            for piece in finished:
                try:
                    wav = await self.model.decode(piece.chunks, piece.ref_rms, piece.settings)
                except Exception as exc:
                    raise StreamFailed(f"the codec failed on {self._where(piece.index)}: {type(exc).__name__}: "
                                       f"{exc}") from exc
                self.assembly.spoken(piece.index, wav)
                yield from_placed()
        rendered = self.assembly.finish()
        tail = rendered.audio[self.samples_out:]
        if len(tail):  # a timed track's silence after its last cue's speech
            start, self.samples_out = self.samples_out, len(rendered.audio)
            yield ScriptProgress(total, total, tail, start)
        if self.caption_words:  # after the whole track is out: words never hold audio back
            loop = asyncio.get_running_loop()
            captions = await loop.run_in_executor(self.model.align_pool, align_captions, self.model.tts, self.plan,
                                                  rendered)
            rendered = replace(rendered, captions=captions)
        self.rendered = rendered

    def _codes(self, waiter: asyncio.Future, job: Job) -> np.ndarray:
        try:
            return waiter.result()
        except (CancelledError, asyncio.CancelledError):
            raise
        except Exception as exc:  # the item failed in the engine
            raise StreamFailed(f"decoding {self._where(job.piece)} failed: {type(exc).__name__}: {exc}") from exc

    def _where(self, index: int) -> str:
        return f"{self.plan.source} {self.plan.pieces[index].segment.where}"

    def _check_deadline(self) -> None:
        if time.perf_counter() > self.deadline:
            raise StreamFailed(f"the script ran past {flag('script_seconds')}; send a shorter script, or fewer steps")

    def cancel(self) -> None:
        for _, item in self.waiting.values():
            self.model.cancel(item)
        self.held.clear()

    def close(self) -> None:
        """A script's text is all there from the start: nothing to close."""

    def finish(self) -> None:
        """Write the request's log line, once."""
        if not self.finished:
            self.finished = True
            (logger.warning if self.status == "error" else logger.info)(self.log_line())

    def log_line(self) -> str:
        return request_log("script", self.request_id, self, {
            "segments": len(self.plan.pieces) if self.plan else 0,
            "spoken": self.placed - (self.assembly.reused if self.assembly else 0),
            "reused": self.assembly.reused if self.assembly else 0,
            "audio": f"{self.samples_out / SAMPLE_RATE:.2f}s", "first_audio": since(self.first_audio_at, self.received_at),
            "total": since(time.perf_counter(), self.received_at)})


def script_summary(rendered: RenderedScript, response_format: str, captions: str | None, book=None) -> dict:
    """What every door answers of a finished script beside its audio: its length, each segment's place on the
    track (seconds, the speech without its pads), in `captions` (srt, vtt, or None) its captions, and for a
    book (a BookScript) its title, author and chapters, each where its first speech starts."""
    rate = rendered.sample_rate
    summary = {"response_format": response_format, "sample_rate": rate, "duration": len(rendered.audio) / rate,
               "segments_spoken": rendered.spoken, "segments_reused": rendered.reused,
               "segments": [{"index": c.index, "speaker": c.speaker, "text": c.text, "start": c.start / rate,
                             "end": c.end / rate,
                             **({} if c.words is None else {"words": [{"word": w["word"], "start": w["start"] / rate,
                                                                       "end": w["end"] / rate} for w in c.words]})}
                            for c in rendered.captions]}
    if captions is not None:
        summary.update(captions_format=captions, captions=caption_text(rendered.captions, captions, rate))
    if book is not None:
        summary["book"] = {"title": book.book.title, "author": book.book.author, "chapters": [
            {"title": span.title, "start": span.mark / rate, "end": span.end / rate, "first_segment": span.segments.start}
            for span in chapter_spans(book, rendered)]}
    return summary
