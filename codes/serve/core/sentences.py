"""One speech request as chunk work items on the step engine, audio out in order as each is ready.

The text is cut into chunks by codes/runtime/text/chunks.py: a first clause, so the first audio comes
early, then pieces that grow back to whole sentences. Items are submitted in order of need: the
first chunk is urgent (the engine runs it ahead of other requests' later chunks), and a chunk's
successor joins the engine when the chunk's codes are done, due when the chunk's audio will have
played, so it is made while the chunk is decoded and played. A request's first chunk never shares
its steps with its own later ones (on a CPU a step's cost grows with its rows: measured on the tiny
build, submitting two at once took the first audio from 0.9 s to 2.5 s). Every chunk clones the
same voice prompt, and chunk i of a seeded request draws its noise from seed + i (a one-chunk
request from the seed itself, as inference.py --seed does).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from concurrent.futures import CancelledError
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from codes.common.errors import UserError
from codes.runtime.contract.settings import GenerationSettings, max_item_frames
from codes.runtime.contract.specs import FRAME_RATE, SAMPLE_RATE
from codes.runtime.model.decoding import RandomNoise
from codes.runtime.model.engine import QueueFull, WorkItem
from codes.runtime.request import Request, Voice
from codes.runtime.synthesis import OmniVoiceOnnx
from codes.runtime.text.duration import text_weight
from codes.serve.core.loaded_model import LoadedModel
from codes.serve.edge.errors import StreamFailed
from codes.serve.edge.limits import flag

logger = logging.getLogger("omnivoice.serve")

LOOKAHEAD = 1  # sentences submitted ahead once the current one's codes are done
QUEUE_RETRY_S = 0.05  # a later sentence that meets a full queue waits for room rather than failing


@dataclass(frozen=True)
class SpokenPiece:
    """One chunk's audio and where it lies in its request's audio: what a door sends, and when the
    chunk's text is heard, measured from the samples themselves (never spread over words by guess)."""

    text: str  # the chunk as it was spoken (clause or sentence; normalized where the request asked)
    wav: np.ndarray  # float32, 24 kHz
    start: int  # samples of the request's audio before it
    words: asyncio.Future | None = None  # its words' timings, being aligned, where the request asked for them

    def timing(self, words: list[dict] | None = None) -> dict:
        """Seconds from the request's first sample to where this chunk's audio begins and ends; with its
        words (align_words' list, in seconds from the chunk's start), each word's too."""
        offset = self.start / SAMPLE_RATE
        timing = {"text": self.text, "start": offset, "end": (self.start + len(self.wav)) / SAMPLE_RATE}
        if words is not None:
            timing["words"] = [{"word": w["word"], "start": round(offset + w["start"], 3),
                                "end": round(offset + w["end"], 3)} for w in words]
        return timing

    async def timed(self) -> dict:
        """timing(), with the words once they are aligned (at once, where none are being aligned)."""
        return self.timing(None if self.words is None else await self.words)


@dataclass(kw_only=True)
class SentenceStream:
    """A request's sentences, their work items, and what its log line reports (codes/serve/core/lifecycle.py
    owns when it starts and ends). Made with keywords: eight of its fields would otherwise be told apart
    by position alone."""

    model: LoadedModel
    requests: list[Request]
    settings: GenerationSettings
    seed: int | None
    ref_rms: float | None = None  # the voice's loudness, once it is resolved
    chars: int = 0
    received_at: float = field(default_factory=time.perf_counter)
    items: list[WorkItem | None] = field(default_factory=list)
    first_audio_at: float | None = None
    audio_samples: int = 0
    status: str = "ok"
    reason: str | None = None  # why it ended in error
    deadline: float = float("inf")  # perf_counter time by which the whole request must be done
    request_id: int = 0
    door: str = "http"  # which protocol asked (http, wyoming, mcp), for the log line
    replica: str | None = None  # the Ray Serve replica (NAME/PID) that speaks it, named in the log line
    closed: bool = True  # False while text may still arrive (extend(), then close())
    finished: bool = False  # its log line is written
    waiting_for_text: Callable[[], None] | None = None  # called when every sentence so far is spoken and more may come
    options: dict = field(default_factory=dict)  # what the request asked beyond the server's defaults, for its log line
    word_timings: bool = False  # align each chunk's words as it is made (codes/serve/core/loaded_model.py words)
    language: str | None = None  # the request's, for the alignment (None: the recogniser tells)

    def __post_init__(self):
        self.items = [None] * len(self.requests)
        self._grown = asyncio.Event()

    def extend(self, requests: list[Request], chars: int) -> None:
        """More chunks (of `chars` characters) for a job whose text is still arriving, spoken after
        the ones before: submitted now where nothing is ahead of them, else when the chunk before is."""
        if self.closed:
            raise RuntimeError("extend() on a closed job")
        self.chars += chars
        self.requests.extend(requests)
        self.items.extend([None] * len(requests))
        if self.items[0] is None:
            self._submit(0)
        else:  # its predecessor's codes are done already: nothing will submit it sooner
            index = len(self.requests) - len(requests)
            before = self.items[index - 1]
            if before is not None and before.future.done() and self.items[index] is None:
                try:
                    self._submit(index)
                except QueueFull:
                    pass  # pieces() waits for room
        self._grown.set()

    def close(self) -> None:
        """No more text: pieces() ends after the chunks it has."""
        self.closed = True
        self._grown.set()

    def _submit(self, index: int) -> None:
        noise = RandomNoise(None if self.seed is None else self.seed + index)
        due = None
        if index > 0:  # needed once the chunk before it has played
            due = time.perf_counter() + self.requests[index - 1].target_len / FRAME_RATE
        self.items[index] = self.model.submit(self.requests[index], self.settings, noise, urgent=index == 0, due=due)

    def _check_deadline(self) -> None:
        if time.perf_counter() > self.deadline:
            raise past_deadline()

    def left(self) -> float | None:
        return None if self.deadline == float("inf") else max(self.deadline - time.perf_counter(), 0.0)

    async def _ensure_submitted(self, index: int) -> None:
        """Submit a later chunk, waiting for room in the queue until the request's deadline."""
        while self.items[index] is None:
            self._check_deadline()
            try:
                self._submit(index)
            except QueueFull:
                await asyncio.sleep(QUEUE_RETRY_S)

    async def _codes(self, index: int) -> np.ndarray:
        try:
            async with asyncio.timeout(self.left()):
                return await self.model.codes(self.items[index])
        except TimeoutError:  # the loop's clock and perf_counter may differ by a hair
            raise past_deadline() from None
        except (CancelledError, asyncio.CancelledError):
            raise
        except Exception as exc:  # the item failed in the engine
            raise StreamFailed(f"decoding chunk {index + 1} failed: {type(exc).__name__}: {exc}") from exc

    async def pieces(self):
        """Each chunk as a SpokenPiece, in order, as soon as it is decoded; StreamFailed if one cannot
        be made."""
        index = 0
        while True:
            if index == len(self.requests):
                if self.closed:
                    return
                if self.waiting_for_text is not None:
                    self.waiting_for_text()
                self._grown.clear()
                try:
                    async with asyncio.timeout(self.left()):
                        await self._grown.wait()
                except TimeoutError:  # the loop's clock and perf_counter may differ by a hair
                    raise past_deadline() from None
                continue
            self._check_deadline()
            await self._ensure_submitted(index)
            codes = await self._codes(index)
            for ahead in range(index + 1, min(index + 1 + LOOKAHEAD, len(self.requests))):
                if self.items[ahead] is None:
                    try:
                        self._submit(ahead)
                    except QueueFull:
                        pass
            try:
                wav = await self.model.decode(codes, self.ref_rms, self.settings)
            except Exception as exc:
                raise StreamFailed(f"the codec failed on chunk {index + 1}: {type(exc).__name__}: {exc}") from exc
            if self.first_audio_at is None:
                self.first_audio_at = time.perf_counter()
            text = self.requests[index].text
            words = self.model.words(wav, text, self.language) if self.word_timings and self.model.word_timings else None
            piece = SpokenPiece(text, wav, self.audio_samples, words)
            self.audio_samples += len(wav)
            index += 1
            yield piece

    def cancel(self) -> None:
        for item in self.items:
            if item is not None:
                self.model.cancel(item)

    def finish(self) -> None:
        """Write the request's log line, once."""
        if not self.finished:
            self.finished = True
            (logger.warning if self.status == "error" else logger.info)(self.log_line(self.request_id))

    def output_frames(self) -> int:
        return int(round(self.audio_samples / SAMPLE_RATE * FRAME_RATE))

    def log_line(self, request_id: int) -> str:
        started = [item for item in self.items if item is not None and item.started_at is not None]
        queue_wait = (min(item.started_at for item in started) - self.received_at) if started else float("nan")
        shared = max((item.max_shared for item in self.items if item is not None), default=0)
        return request_log("speech", request_id, self, {
            "chars": self.chars, "sentences": len(self.requests), "audio": f"{self.audio_samples / SAMPLE_RATE:.2f}s",
            "queue_wait": f"{queue_wait:.3f}s", "first_audio": since(self.first_audio_at, self.received_at),
            "total": since(time.perf_counter(), self.received_at), "max_batch_shared": shared})


def since(moment: float | None, received_at: float) -> str:
    """Seconds from a request's arrival to a moment, as its log line writes them (nan: it never came)."""
    return f"{(moment - received_at) if moment else float('nan'):.3f}s"


def request_log(kind: str, request_id: int, job, fields: dict) -> str:
    """A request's one log line, the same shape for every kind (speech, script): its id, replica, door and
    status, then `fields`, then what it asked beyond the defaults and why it failed (tests and operators
    read these key=value pairs)."""
    replica = "" if job.replica is None else f" replica={job.replica}"
    options = f" options={json.dumps(job.options, separators=(',', ':'))}" if job.options else ""
    reason = "" if job.reason is None else f" reason={json.dumps(job.reason)}"
    shown = " ".join(f"{name}={value}" for name, value in fields.items())
    return f"{kind} request={request_id}{replica} door={job.door} status={job.status} {shown}{options}{reason}"


def past_deadline() -> StreamFailed:
    return StreamFailed(f"the request ran past {flag('max_request_seconds')}; send shorter input or fewer steps")


def settle_sentences(tts: OmniVoiceOnnx, chunks: list[str], language, instruct, voice: Voice | None,
                     duration: float | None, speed: float | None,
                     settings: GenerationSettings = GenerationSettings()) -> list[Request]:
    """Each chunk settled; an overall duration is shared among chunks by their spoken weight. A chunk
    too long for one work item (a slow speed, a long duration) is refused here, before any audio."""
    durations: list[float | None] = [None] * len(chunks)
    if duration is not None:
        if not duration > 0:
            raise UserError(f"duration must be > 0 seconds, got {duration}")
        weights = [max(text_weight(chunk), 1e-6) for chunk in chunks]
        durations = [duration * w / sum(weights) for w in weights]
    requests = tts.settle(chunks, language, instruct, voice, durations, speed)
    longest = max(request.target_len for request in requests)
    if longest > max_item_frames(settings):
        raise UserError(f"at this speed or duration a piece of the text would last {longest / FRAME_RATE:.0f} s, "
                        f"over the {settings.audio_chunk_threshold:g} s one piece may; raise speed or lower duration")
    return requests
