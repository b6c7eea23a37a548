"""A request's life, written once for every door (after vLLM's AsyncLLM.generate, one path that adds
the request, yields its outputs and aborts it in `finally` when the caller goes away). `RequestLife` is
what every kind of request shares (admission, how it ended, the release, the log line); `SpeechRequest`
speaks one text; a script's request, many segments.

    async with SpeechRequest(state, params, door) as speaking:
        async for piece in speaking.spoken():  # or pieces(), the audio alone
            ...  # the door's protocol: HTTP bytes, Wyoming events, an MCP result

Entering admits the request (one count, one rule for every door: 503 while the server cannot work,
429 past --max-concurrent), resolves its voice and queues its first sentence. Leaving records how it
ended, cancels whatever work the client left behind, frees its slot and writes its one log line,
whatever the door did: finished, raised, was cancelled or went away. A door only translates.

A request whose text comes in pieces (`streamed_text`: Wyoming's synthesize-chunk, an LLM's reply)
takes text with push() and close(); it holds a slot only while it has text to speak: taken when a
sentence is ready, given back while it waits for more (docs/DESIGN.md §wyoming-bounds).

With normalize_text a whole text is normalized before it is cut, streamed text sentence by sentence as
it becomes ready; either way off the loop (a grammar's first use takes about a second).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import time

from codes.common.errors import UserError
from codes.common.journal import fingerprint
from codes.runtime.book import BOOK_FORMATS, DIALOGUE_SPEAKER, BookScript, Reading, book_script, parse_book
from codes.runtime.contract.settings import SCRIPT_MAX_BATCH
from codes.runtime.model.engine import QueueFull
from codes.runtime.request import Voice
from codes.runtime.script import (ScriptBounds, SpeakerVoice, check_bounds, check_name, parse_script, parse_voice,
                                  piece_fingerprints, plan_script, resolve_voice)
from codes.runtime.text.chunks import TextStream, stream_chunks
from codes.runtime.text.normalize import normalize_text
from codes.runtime.text.voice_design import resolve_language
from codes.serve.core.params import ScriptParams, SpeechParams, book_bytes
from codes.serve.core.script_stream import ScriptStream
from codes.serve.core.sentences import SentenceStream, SpokenPiece, past_deadline, settle_sentences
from codes.serve.core.state import ServerState
from codes.serve.edge.errors import RequestError, StreamFailed, as_request_error
from codes.serve.edge.limits import flag
from codes.serve.voices.book import DESIGN_VOICES
from codes.serve.voices.resolver import UnknownVoice
from codes.serve.voices.uploads import OneOffClip, Upload, save_upload

logger = logging.getLogger("omnivoice.serve")


def _aligned(piece: SpokenPiece) -> list[dict] | None:
    """A chunk's aligned words, or None (its timing then says no words) where the alignment failed."""
    try:
        return piece.words.result()
    except Exception as exc:  # noqa: BLE001 (the speech goes on; the log says why its words are missing)
        logger.warning("no word timings for %r: %s: %s", piece.text[:40], type(exc).__name__, exc)
        return None


class RequestLife:
    """What every request's life shares, whatever its job (a speech request's sentences, a script's
    segments): admission and its one slot, how it ended, what the client left cancelled, its log line.
    A subclass makes its job and its work in `_open`; `job` is anything with `status`, `reason`,
    `cancel()`, `close()` and `finish()` (its log line, once)."""

    def __init__(self, state: ServerState, door: str, received_at: float | None = None):
        self.state, self.door = state, door
        self.received_at = time.perf_counter() if received_at is None else received_at
        self.model = None  # the loaded model, once admitted
        self.job = None  # made on entering
        self.holds_slot = False
        self.completed = False  # everything was given out
        self.ended: tuple[str, str | None] | None = None  # (status, reason) when the door ended it early

    async def __aenter__(self):
        self.model = self.state.ready()  # 503 before any work
        try:
            await self._open()
        except BaseException as exc:
            await self.__aexit__(type(exc), exc, exc.__traceback__)
            raise
        return self

    async def _open(self) -> None:
        raise NotImplementedError

    async def __aexit__(self, kind, exc, tb) -> None:
        job = self.job
        try:
            if job is not None:
                job.status, job.reason = self._outcome(exc)
                job.cancel()
                job.close()
                job.finish()
        finally:
            self._release()

    def _outcome(self, exc: BaseException | None) -> tuple[str, str | None]:
        """How the request ended, for its log line: the door's word where it ended it early."""
        if self.ended is not None:
            return self.ended
        gone = "shutdown" if self.state.draining else "disconnected"
        if exc is None:
            return ("ok", None) if self.completed else (gone, None)
        # The engine resolves an item it dropped mid-step with concurrent.futures.CancelledError (an
        # Exception, not asyncio's): its items were taken away, so the request was going, not failing.
        if isinstance(exc, (asyncio.CancelledError, concurrent.futures.CancelledError, GeneratorExit)):
            return gone, None
        if isinstance(exc, ConnectionError):  # the client left, or stopped reading
            return "disconnected", str(exc) or None
        return "error", as_request_error(exc).message

    def end(self, status: str, reason: str | None = None) -> None:
        """The door ends the request early (a timeout it keeps, a refused stream): its items are
        cancelled now, pieces() stops, and the log line says `status`."""
        if self.ended is None:
            self.ended = (status, reason)
        if self.job is not None:
            self.job.cancel()
            self.job.close()

    def _admit(self) -> None:
        self.state.admit()
        self.holds_slot = True

    def _release(self) -> None:
        if self.holds_slot:
            self.holds_slot = False
            self.state.release()

    def _job_fields(self) -> dict:
        """What every job's log line carries about its request."""
        config = self.state.config
        return {"received_at": self.received_at, "deadline": self.received_at + self._seconds_allowed(),
                "request_id": next(self.state.request_ids), "door": self.door, "replica": config.replica}

    def _seconds_allowed(self) -> float:
        return self.state.config.limits.max_request_seconds


class SpeechRequest(RequestLife):
    """One speech request from admission to its log line (see the module's docstring)."""

    def __init__(self, state: ServerState, params: SpeechParams, door: str, streamed_text: bool = False,
                 received_at: float | None = None):
        super().__init__(state, door, received_at)
        self.params, self.streamed_text = params, streamed_text
        self.text = TextStream()
        self.chars = 0
        self.voice = self.instruct = None
        self.job: SentenceStream | None = None
        self.held: list[tuple[list[str], int]] = []  # streamed text that came before the voice was resolved
        self.opened = False  # the voice is resolved: text goes to the job, not to `held`
        self.closing = False
        self.taking = asyncio.Lock()  # push() and close() in order, though normalizing waits on an executor

    async def _open(self) -> None:
        if not self.streamed_text:
            self._admit()
        self.job = self._new_job()
        self.voice, self.instruct = await self._resolve_voice()
        self.job.ref_rms = self.voice.rms if self.voice else None
        self.opened = True
        if not self.streamed_text:
            (text,) = await self._normalized([self.params.text])
            chunks = stream_chunks(text)
            if not chunks:
                raise RequestError(400, "input has nothing to speak", "input")
            self._add(chunks, len(self.params.text), self.params.duration)
            self._close()
        else:
            for chunks, chars in self.held:
                self._add(chunks, chars)
            self.held = []
            if self.closing:
                self.job.close()

    async def pieces(self):
        """Each sentence's audio (float32, 24 kHz) in order as it is decoded (see spoken())."""
        async for piece in self.spoken():
            yield piece.wav

    async def spoken(self):
        """Each chunk as a SpokenPiece (its text, audio and offset in the request's audio) in order as
        it is decoded; StreamFailed if one cannot be made. A stream that ends with nothing said is
        refused here, for every door."""
        try:
            async for piece in self.job.pieces():
                yield piece
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if self.ended is None or (task is not None and task.cancelling()):
                raise
            return  # ended by the door: its items' cancellation reached this wait
        if self.ended is not None:
            return
        if not self.job.requests:
            raise RequestError(400, "the text is empty; send at least one word to speak", "input", "empty_text")
        self.completed = True

    @property
    def owes_client(self) -> bool:
        """Work the client has asked for is still to come: audio being made, text that came before the voice
        was ready, or the rest of an utterance it ended (its words included), for as long as the request runs.
        A streamed request that has spoken all its text and waits for more owes nothing."""
        return self.holds_slot or self.closing or bool(self.held)

    async def heard(self):
        """spoken(), with each chunk's timing: a SpokenPiece as soon as its audio is made, then its timing (a
        dict: SpokenPiece.timing, with its words where the request asked and the build aligns) as soon as it
        is known. Timings come in order, each after its chunk's audio; audio never waits for a word to be
        aligned (docs/DESIGN.md §word-timings). A failed alignment costs only that chunk's words."""
        pieces = self.spoken().__aiter__()
        coming = asyncio.ensure_future(pieces.__anext__())
        untimed: collections.deque[SpokenPiece] = collections.deque()
        try:
            while coming is not None or untimed:
                if untimed and untimed[0].words is None:
                    yield untimed.popleft().timing()
                    continue
                waits = {coming} if coming is not None else set()
                if untimed:
                    waits.add(untimed[0].words)
                done, _ = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                if untimed and untimed[0].words in done:
                    piece = untimed.popleft()
                    yield piece.timing(_aligned(piece))
                    continue
                try:
                    piece = coming.result()
                except StopAsyncIteration:
                    coming = None
                    continue
                coming = asyncio.ensure_future(pieces.__anext__())
                yield piece
                untimed.append(piece)
        finally:
            for piece in untimed:
                if piece.words is not None:
                    piece.words.cancel()
            if coming is not None:
                coming.cancel()
                with contextlib.suppress(BaseException):
                    await coming
            await pieces.aclose()

    def _new_job(self) -> SentenceStream:
        """The request's sentences, empty until its voice is known (every door's jobs are made here)."""
        params = self.params
        defaults = self.state.config.settings.to_dict()
        options = {name: value for name, value in params.settings.to_dict().items() if value != defaults[name]}
        if params.normalize_text:
            options["normalize_text"] = True
        if params.ref_audio is not None:
            options["ref_audio_bytes"] = len(params.ref_audio)
        if params.word_timings:
            options["word_timings"] = True
        return SentenceStream(model=self.model, requests=[], settings=params.settings, seed=params.seed,
                              closed=False, waiting_for_text=self._release if self.streamed_text else None,
                              options=options, word_timings=params.word_timings, language=params.language,
                              **self._job_fields())

    async def _normalized(self, texts: list[str]) -> list[str]:
        """The texts as normalize_text writes them, in the language the request resolved (upstream's
        order), when the request asks; in an executor, since a grammar's first use is slow."""
        if not self.params.normalize_text or not texts:
            return texts
        language = resolve_language(self.params.language)
        loop = asyncio.get_running_loop()
        return [await loop.run_in_executor(None, normalize_text, text, language) for text in texts]

    # --- streamed text ----------------------------------------------------------------------------

    async def push(self, text: str) -> None:
        limit = self.state.config.limits.max_input_chars
        if self.chars + len(text) > limit:
            raise RequestError(400, f"the text is over {limit} characters, the most {flag('max_input_chars')} "
                                    "allows", "input", "input_too_long")
        self.chars += len(text)
        async with self.taking:
            self._add(await self._normalized(self.text.push(text)), len(text))

    async def flush(self) -> None:
        """What is pending is spoken now, though no sentence end has come; more text may follow."""
        async with self.taking:
            await self._flush_pending()

    async def close(self) -> None:
        """No more text: what is pending is spoken, and pieces() ends after it."""
        async with self.taking:  # flushed and closed under one hold, so no text pushed between is left unspoken
            await self._flush_pending()
            self._close()

    async def _flush_pending(self) -> None:
        chunks = self.text.flush() if self.streamed_text and not self.closing else []
        if chunks:
            self._add(await self._normalized(chunks), 0)

    def _close(self) -> None:
        self.closing = True
        if self.opened:
            self.job.close()

    def _add(self, chunks: list[str], chars: int, duration: float | None = None) -> None:
        if self.ended is not None:  # the door ended it: the rest of its text is not spoken
            return
        if not self.opened:
            self.held.append((chunks, chars))
            return
        if not chunks:
            self.job.chars += chars
            return
        if not self.holds_slot:
            self._admit()
        requests = settle_sentences(self.model.tts, chunks, self.params.language, self.instruct, self.voice,
                                    duration, self.params.speed, self.params.settings)
        self.job.extend(requests, chars)  # QueueFull for a first sentence: the request's 429

    # --- admission and the voice ------------------------------------------------------------------

    async def _resolve_voice(self):
        params = self.params
        clip = None
        if params.ref_audio is not None:
            clip = OneOffClip(params.ref_audio, params.ref_text, self.state.config.limits,
                              params.settings.preprocess_prompt)
        try:  # a clip is encoded here, within the request's slot and deadline
            async with asyncio.timeout(self.job.left()):
                return await self.state.voices.resolve(self.model, params.voice, params.instructions, params.text,
                                                       clip)
        except TimeoutError:
            raise past_deadline() from None
        except UnknownVoice as exc:
            raise RequestError(404, str(exc), "voice", "voice_not_found") from None
        except QueueFull:
            raise
        except UserError as exc:
            if clip is not None:
                raise RequestError(400, str(exc), "ref_audio", "unreadable_audio") from None
            if params.voice in DESIGN_VOICES:
                raise RequestError(400, str(exc), "instructions") from None
            raise RequestError(400, str(exc), "voice", "voice_unreadable") from None


class ScriptRequest(RequestLife):
    """One script from admission to its log line: read and held to the script bounds, its speakers' voices
    resolved (a server voice name through Voices, as any request's; instruct:<attributes> and auto made from
    the speaker's first segment), planned, then its segments on the engine (codes/serve/core/script_stream.py).

        async with ScriptRequest(state, params, door) as scripting:
            async for step in scripting.progress():  # ScriptProgress: pieces done, the track's next samples
                ...
            scripting.job.rendered  # the whole track, stems and captions
    """

    def __init__(self, state: ServerState, params: ScriptParams, door: str, received_at: float | None = None):
        super().__init__(state, door, received_at)
        self.params = params
        self.job: ScriptStream | None = None
        self.keeping: list[asyncio.Future] = []  # pieces being written to the store (--script-cache-bytes)
        self.book: BookScript | None = None  # a book's script: its chapters

    def _seconds_allowed(self) -> float:
        return self.state.config.limits.script_seconds

    def _admit(self) -> None:
        self.state.admit_script()
        self.holds_slot = True

    def _release(self) -> None:
        if self.holds_slot:
            self.holds_slot = False
            self.state.release_script()

    async def _open(self) -> None:
        self._admit()
        params, config = self.params, self.state.config
        if params.caption_words and not self.model.word_timings:  # refused before any work, in the runtime's words
            try:
                self.model.tts.check_word_timings()
            except UserError as exc:
                raise RequestError(400, str(exc), "caption_words", "no_word_timings") from None
        defaults = config.settings.to_dict()
        options = {name: value for name, value in params.settings.to_dict().items() if value != defaults[name]}
        # Sharing steps among a script's own segments cost time on the CPU (bench/script_results.md): its items
        # in the engine at once are the runtime's default for the provider, within --max-batch.
        at_once = min(self.model.engine.max_batch, SCRIPT_MAX_BATCH.get(self.model.tts.provider, 1))
        if params.caption_words:
            options["caption_words"] = True
        self.job = ScriptStream(model=self.model, max_batch=at_once, options=options,
                                caption_words=params.caption_words, **self._job_fields())
        loop = asyncio.get_running_loop()
        script = await loop.run_in_executor(None, self._read)
        voices = await self._speakers()
        try:  # every segment settled (normalized, where asked) before any work: off the loop
            plan = await loop.run_in_executor(None, lambda: plan_script(
                script, voices, self.model.tts, params.settings, params.seed, params.gap, params.postprocess,
                params.language, params.speed, params.normalize_text))
        except UserError as exc:
            raise RequestError(400, str(exc), "script", "bad_script") from None
        for warning in plan.warnings:
            logger.warning("script request=%d: %s", self.job.request_id, warning)
        store = self.state.script_pieces
        if store is None:
            self.job.start(plan)
            return
        keys, kept = await loop.run_in_executor(None, self._kept_pieces, store, plan)

        def keep(index, piece):  # off the loop; the request completes once its pieces are kept
            self.keeping.append(loop.run_in_executor(None, store.put, keys[index], piece))

        self.job.start(plan, kept, keep)

    def _kept_pieces(self, store, plan) -> tuple[list[str], dict]:
        """Each piece's name in the store (its fingerprint, within the server's key: a resubmission by another
        key shares nothing), and the pieces the store holds, by index."""
        key = fingerprint(self.state.config.api_key or "")
        keys = [fingerprint(key, print_) for print_ in piece_fingerprints(plan, self.model.tts.build_key())]
        return keys, {index: piece for index, name in enumerate(keys) if (piece := store.get(name)) is not None}

    def _read(self):
        """The script, parsed and held to the server's bounds (400 naming the line or cue, or the bound). A book
        is read as inference.py reads one (codes/runtime/book), its dialogue spoken by a speaker named
        "Dialogue" where the request declares one."""
        limits, params = self.state.config.limits, self.params
        try:
            if params.script_format in BOOK_FORMATS:
                self.book = book_script(parse_book(book_bytes(params), params.script_format,
                                                   source=f"script ({params.script_format})"),
                                        Reading(dialogue_speaker=DIALOGUE_SPEAKER if DIALOGUE_SPEAKER in params.speakers
                                                else None, language=params.language))
                script = self.book.script
            else:
                script = parse_script(params.script, params.script_format, list(params.speakers), params.overlap,
                                      f"script ({params.script_format})")
            check_bounds(script, ScriptBounds(limits.max_script_segments, limits.max_script_chars,
                                              limits.max_script_seconds))
        except UserError as exc:
            raise RequestError(400, str(exc), "script", "bad_script") from None
        return script

    async def _speakers(self) -> dict[str, SpeakerVoice]:
        """Each declared speaker's voice, in order (the first speaks unmarked segments)."""
        voices = {}
        for name, declared in self.params.speakers.items():
            try:
                spec = parse_voice(declared, paths=False)
                if spec.kind == "name":
                    async with asyncio.timeout(self.job.left()):
                        voice, _ = await self.state.voices.resolve(self.model, spec.value, None, "")
                    voices[check_name(name)] = SpeakerVoice(voice)
                else:
                    voices[check_name(name)] = resolve_voice(name, spec)
            except TimeoutError:
                raise StreamFailed(f"the script ran past {flag('script_seconds')} before its voices were "
                                   "ready") from None
            except UnknownVoice as exc:
                raise RequestError(404, f"speaker {name}: {exc}", "speakers", "voice_not_found") from None
            except UserError as exc:
                raise RequestError(400, str(exc) if str(exc).startswith("speaker") else f"speaker {name}: {exc}",
                                   "speakers") from None
        return voices

    async def progress(self):
        """Each ScriptProgress as a piece is placed (codes/serve/core/script_stream.py); the request is complete after the
        last, with the whole track in `job.rendered`."""
        async for step in self.job.progress():
            yield step
        try:
            await asyncio.gather(*self.keeping)
        except OSError as exc:  # a full disk: this script is spoken, only a resubmission speaks more
            logger.warning("script request=%d: its segments could not all be kept: %s", self.job.request_id, exc)
        self.completed = True

    async def whole(self):
        """The finished track (RenderedScript), for a door that answers once."""
        async for _ in self.progress():
            pass
        return self.job.rendered


async def save_voice(state: ServerState, read, file_name: str | None, name: str | None,
                     transcript: str | None) -> tuple[str, Voice]:
    """An upload's life, for every door that takes one: its id and kind by the upload rules
    (codes/serve/voices/uploads.py Upload), admitted as a speech request is (encoding a clip, and transcribing
    one sent without its transcript, is work on the model: 503, or 429 past --max-concurrent), saved, and its
    slot freed however that ends. The id and the saved voice come back."""
    upload = Upload.of(file_name, name, transcript)
    model = state.admit()
    try:
        voice = await save_upload(model, state.voices.book, state.config.limits, read, upload.transcript, upload.vid,
                                  upload.voice_file)
    finally:
        state.release()
    return upload.vid, voice
