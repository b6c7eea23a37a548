"""Voices from uploaded clips, for every door that takes one: saved ones (HTTP's POST /v1/audio/voices,
MCP's save_voice), the name and the count checked before any decoding, the save counted again under the
folder's lock; and a speech request's one-off clone (`ref_audio`), encoded the same way and never saved.
A clip's length comes from its header (codes/runtime/audio/processing.py read_clip), refused before it is decoded.
A clip without its transcript is transcribed by the build's recogniser (OmniVoiceOnnx.create_voice) in the same
executor call that encodes it, so the same slot, limits and deadline hold; a build without one refuses it first.
Admission (a slot, like a speech request's) is the caller's: codes/serve/core/lifecycle.py save_voice."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.runtime.audio import processing as audio
from codes.runtime.request import NO_RECOGNISER, Voice, needs_transcript
from codes.serve.edge.errors import RequestError
from codes.serve.edge.limits import Limits, flag
from codes.serve.voices.book import TooManyVoices, VoiceBook, VoiceExists, voice_id
from codes.serve.voices.files import is_voice_file_name, read_voice_file
from codes.serve.voices.pins import PinEngine

logger = logging.getLogger("omnivoice.serve")


def check_transcript(text: str, limits: Limits, param: str) -> str:
    """A clone clip's transcript within --max-transcript-chars (an upload's, or a speech request's ref_text)."""
    if len(text) > limits.max_transcript_chars:
        raise RequestError(400, f"the transcript is {len(text)} characters; the limit is {limits.max_transcript_chars} "
                                f"({flag('max_transcript_chars')})", param, "transcript_too_long")
    return text


def check_upload_size(size: int, limits: Limits, param: str = "file") -> None:
    """The one upload cap, --max-upload-bytes, for every door (HTTP's guard cuts the body at the same bound
    as it streams in, before anything is read whole)."""
    if size > limits.max_upload_bytes:
        raise RequestError(413, f"the upload is over {limits.max_upload_bytes} bytes ({flag('max_upload_bytes')}); "
                                "a clone prompt needs only a few seconds: trim it", param, "upload_too_large")


def _clip_samples(data: bytes, limits: Limits, param: str) -> tuple[np.ndarray, int]:
    """audio.read_clip under the upload limit, its refusals as the API's 400s."""
    try:
        return audio.read_clip(data, limits.max_ref_seconds_upload)
    except audio.ClipTooLong as exc:
        raise RequestError(400, f"the clip is {exc.length}; the limit is {exc.limit:g} s ({flag('max_ref_seconds_upload')}; "
                                "a clone prompt needs only a few seconds): trim it", param, "clip_too_long") from None
    except UserError as exc:
        raise RequestError(400, str(exc), param, "unreadable_audio") from None


def check_transcribable(model: PinEngine, transcript: str | None, param: str) -> None:
    """A clip without its transcript is refused before it is read where the build has no recogniser: the
    runtime's one line, naming --include-asr (and serve.py's --asr_dir), not the server's folders."""
    if needs_transcript(transcript) and not model.tts.has_recogniser:
        raise RequestError(400, NO_RECOGNISER.format(folder="this server's build"), param, "no_recogniser")


async def encode_clip(model: PinEngine, data: bytes, transcript: str | None, limits: Limits,
                      preprocess_prompt: bool = True, param: str = "file") -> Voice:
    """A clip's clone prompt: read off the loop, then transcribed where `transcript` is missing and encoded on
    the codec's pool (the codec's one worker)."""
    check_transcribable(model, transcript, "ref_text" if param == "ref_audio" else "text")
    loop = asyncio.get_running_loop()
    wav, rate = await loop.run_in_executor(None, _clip_samples, data, limits, param)
    try:  # a clip silent through, too short, or in which the recogniser heard nothing: the runtime's one line
        return await loop.run_in_executor(model.decode_pool, model.tts.create_voice, (wav, rate), transcript,
                                          preprocess_prompt)
    except UserError as exc:
        raise RequestError(400, str(exc), param, "unreadable_audio") from None


@dataclass(frozen=True)
class OneOffClip:
    """A speech request's `ref_audio` and `ref_text`: a voice for that request only, never written to
    --voices_dir (codes/serve/voices/resolver.py Voices.resolve encodes it, within the request's slot)."""

    data: bytes
    transcript: str | None  # None: the recogniser's
    limits: Limits
    preprocess_prompt: bool = True

    async def voice(self, model: PinEngine) -> Voice:
        return await encode_clip(model, self.data, self.transcript, self.limits, self.preprocess_prompt, "ref_audio")


@dataclass(frozen=True)
class Upload:
    """What an upload is, by the rules every door that takes one follows: a file named like a voice file
    (.pt, .npz, .rvq) is one and carries its own transcript; the id is the given name, else the file's stem
    (codes/serve/voices/book.py voice_id keeps either inside the voices folder); a clip's transcript, when
    left out, is the recogniser's."""

    vid: str
    transcript: str | None
    voice_file: bool

    @classmethod
    def of(cls, file_name: str | None, name: str | None, transcript: str | None) -> "Upload":
        voice_file = is_voice_file_name(file_name)
        given = name[:256] if name else Path(str(file_name or "")[:256]).stem
        try:
            vid = voice_id(given)
        except UserError as exc:
            raise RequestError(400, str(exc), "name") from None
        return cls(vid, None if voice_file else transcript, voice_file)


async def save_upload(model: PinEngine, book: VoiceBook, limits: Limits, read, transcript: str | None, vid: str,
                      voice_file: bool = False) -> Voice:
    """The voice saved from a reference clip (`await read()` gives its bytes, read only once the name
    and the count are known to be free) and its transcript (None: the recogniser's); RequestError for what
    the limits refuse. `voice_file`: the bytes are a voice file (.pt or .npz: codes/serve/voices/files.py),
    kept as they are."""
    if not voice_file:
        check_transcribable(model, transcript, "text")
        if not needs_transcript(transcript):
            check_transcript(transcript, limits, "text")
    loop = asyncio.get_running_loop()
    if await loop.run_in_executor(None, book.taken, vid):  # before any decoding
        raise _voice_exists(vid)
    if len(await loop.run_in_executor(None, book.saved_ids)) >= limits.max_voices:
        raise _too_many_voices(limits)
    data = await read()
    check_upload_size(len(data), limits)
    if voice_file:
        try:
            voice = await loop.run_in_executor(None, read_voice_file, data, vid, limits)
        except UserError as exc:
            raise RequestError(400, str(exc), "file", "unreadable_voice") from None
    else:
        voice = await encode_clip(model, data, transcript, limits)
    try:  # counted again under the folder's lock: uploads that were decoded at once all passed the count above
        await loop.run_in_executor(None, book.save, vid, voice, limits.max_voices)
    except VoiceExists:
        raise _voice_exists(vid) from None
    except TooManyVoices:
        raise _too_many_voices(limits) from None
    logger.info("saved voice %s (%d frames)", vid, voice.codes.shape[1])
    return voice


def _voice_exists(vid: str) -> RequestError:
    return RequestError(409, f"voice {vid!r} exists; delete it first (DELETE /v1/audio/voices/{vid})", "name",
                        "voice_exists")


def _too_many_voices(limits: Limits) -> RequestError:
    return RequestError(409, f"{limits.max_voices} voices are saved, the most {flag('max_voices')} allows; "
                             "delete one first", "name", "too_many_voices")
