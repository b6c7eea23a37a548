"""Voices as files through the server: wyoming-piper's voice folders imported (serve.py --voices-from DIR),
voice files uploaded as they are, and any voice exported in upstream's format or ours.

wyoming-piper's OmniVoice backend (the Home Assistant community's OmniVoice server, --omnivoice-ref-dir)
keeps one folder per voice, `<DIR>/<language>/<voice>/`: `ref.wav` with its transcript `ref.txt` to clone,
or `instruct.txt` to design. It caches the encoded clip beside it as `ref.rvq` (a torch.save of
ref_audio_tokens, ref_text and ref_rms), made again when the clip is newer. Here DIR is only ever read:
- a clone's `ref.rvq` that is not older than its clip is used as it is (read without torch, and without
  trusting its pickle: codes/runtime/voices/prompt_file.py);
- else its clip is encoded once, in the background as the server starts (one clip at a time on the codec's
  pool, so the first request that names it pays nothing and /health counts those still encoding), and kept
  in `<voices_dir>/imported/` under the clip's content hash (the transcript and the build in the key too),
  so a restart, or a copy of the folder, reads it back;
- an `instruct.txt` is a design voice, pinned like the built-in ones.
The `<language>` folder (en_US, de_DE: a tag whose language the model knows) is the language Wyoming's
describe lists for the voices in it, as wyoming-piper lists its voices' languages.
A voice's id is its folder's name made an id as an upload's name is (codes/serve/voices/book.py voice_id); a
folder whose id is taken (a built-in voice, a saved one, an earlier folder) is skipped with a warning, as
wyoming-piper skips a duplicate name. Folders are read at start; restart to pick up changes.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import threading
from pathlib import Path

from codes.common.errors import UserError
from codes.common.fileio import write_json_atomic
from codes.runtime.audio import processing as audio
from codes.runtime.contract.specs import FRAME_RATE
from codes.runtime.model.engine import QueueFull
from codes.runtime.request import Voice
from codes.runtime.text.voice_design import LANGUAGE_IDS, resolve_instruct
from codes.runtime.voices.prompt_file import MAX_FILE_BYTES
from codes.serve.edge.errors import RequestError
from codes.serve.edge.limits import Limits, flag
from codes.serve.voices.book import ImportedVoice, VoiceBook, voice_id
from codes.serve.voices.pins import PinEngine
from codes.serve.voices.resolver import UnknownVoice, Voices

logger = logging.getLogger("omnivoice.serve")

CLIP, TRANSCRIPT, CODES, INSTRUCT = "ref.wav", "ref.txt", "ref.rvq", "instruct.txt"
IMPORT_FOLDER = "imported"  # under --voices_dir: the imported clips, encoded
MAX_TEXT_BYTES = 64 * 1024  # a transcript or an instruct
MAX_CLIP_BYTES = 256 << 20
MAX_CLIP_SECONDS = 600.0
VOICE_FILE_SUFFIXES = (".pt", ".npz", ".rvq")  # an upload by one of these names is a voice file, not a clip
EXPORT_FORMATS = ("pt", "npz")  # GET /v1/audio/voices/{id}?format=: upstream's, ours
_LANGUAGE_TAG = re.compile(r"([A-Za-z]{2,3})(?:[_-][A-Za-z0-9]{2,8})*")  # en, en_US, zh-Hant-TW


# --- wyoming-piper's folders -----------------------------------------------------------------------

def check_folders(folders) -> tuple[Path, ...]:
    """--voices-from, each a folder that can be listed (UserError naming the first that is not)."""
    checked = []
    for folder in folders or ():
        folder = Path(folder)
        if not folder.is_dir():
            raise UserError(f"--voices-from {folder} is not a folder; give a wyoming-piper voice folder "
                            "(<DIR>/<language>/<voice>/ with ref.wav and ref.txt, or instruct.txt)")
        checked.append(folder)
    return tuple(checked)


def import_folders(folders, book: VoiceBook, build_id: str) -> dict[str, ImportedVoice]:
    """Every voice under the folders, by id; nothing is read but names and small text files yet."""
    found: dict[str, ImportedVoice] = {}
    cache = book.folder / IMPORT_FOLDER
    for root in folders:
        for folder, language in _voice_folders(Path(root)):
            try:
                vid = voice_id(folder.name)
                if vid in found or book.saved_path(vid) is not None:
                    raise UserError(f"its id {vid!r} is taken by "
                                    f"{found[vid].source if vid in found else 'a saved voice in --voices_dir'}")
                found[vid] = _voice(folder, vid, cache, build_id, language)
            except UserError as exc:
                logger.warning("--voices-from: skipping %s: %s", folder, exc)
    if folders:
        logger.info("--voices-from: %d voices (%d designs) from %s", len(found),
                    sum(1 for v in found.values() if v.instruct), ", ".join(map(str, folders)))
    return found


def _voice_folders(root: Path) -> list[tuple[Path, str | None]]:
    """(folder, language) of <root>/<voice>/ (no language) or, as wyoming-piper lays them out,
    <root>/<language>/<voice>/, in name order."""
    found = []
    for child in sorted(p for p in root.iterdir() if p.is_dir()):
        if _is_voice(child):
            found.append((child, None))
        else:
            language = folder_language(child.name)
            found.extend((p, language) for p in sorted(child.iterdir()) if p.is_dir() and _is_voice(p))
    return found


def folder_language(name: str) -> str | None:
    """A language folder's name as Wyoming lists it (as it is: Home Assistant reads en_US and en-US alike),
    or None for a name that is no language tag of a language the model knows."""
    tag = _LANGUAGE_TAG.fullmatch(name)
    return name if tag and tag.group(1).lower() in LANGUAGE_IDS else None


def _is_voice(folder: Path) -> bool:
    return ((folder / CLIP).is_file() and (folder / TRANSCRIPT).is_file()) or (folder / INSTRUCT).is_file()


def _voice(folder: Path, vid: str, cache: Path, build_id: str, language: str | None) -> ImportedVoice:
    if (folder / CLIP).is_file() and (folder / TRANSCRIPT).is_file():  # a clone, as wyoming-piper prefers
        text = _small_text(folder / TRANSCRIPT)
        return ImportedVoice(vid, folder, clone=_Clone(vid, folder, text, cache, build_id), language=language)
    instruct = _small_text(folder / INSTRUCT)
    resolve_instruct(instruct)  # a design the model cannot speak fails here, not in a request
    return ImportedVoice(vid, folder, instruct=instruct, language=language)


def _small_text(path: Path) -> str:
    with open(path, "rb") as f:
        data = f.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise UserError(f"{path.name} is over {MAX_TEXT_BYTES} bytes")
    try:
        text = data.decode("utf-8").strip()
    except UnicodeDecodeError:
        raise UserError(f"{path.name} is not UTF-8 text") from None
    if not text:
        raise UserError(f"{path.name} is empty")
    return text


class _Clone:
    """An imported clone's Voice: its fresh ref.rvq, else its clip encoded once (kept under the clip's hash).
    A clip that cannot be used fails once, and every later use with the same message: folders are read at
    start, so only a restart changes it."""

    def __init__(self, vid: str, folder: Path, text: str, cache: Path, build_id: str):
        self.vid, self.folder, self.text, self.cache, self.build_id = vid, folder, text, cache, build_id
        self._voice: Voice | None = None
        self._failure: UserError | None = None
        self._lock = threading.Lock()

    def ready(self) -> Voice | None:
        return self._voice

    def settled(self) -> bool:
        return self._voice is not None or self._failure is not None

    def __call__(self, tts) -> Voice:
        with self._lock:
            if self._voice is None and self._failure is None:
                try:
                    self._voice = self._cached_codes() or self._encoded(tts)
                except (OSError, UserError) as exc:  # the request names the voice, the log its folder
                    logger.warning("--voices-from: %s: %s", self.folder, exc)
                    problem = exc.strerror if isinstance(exc, OSError) else str(exc)
                    self._failure = UserError(f"imported voice {self.vid!r} cannot be used ({problem}); fix its "
                                              "folder and restart the server")
            if self._failure is not None:
                raise self._failure
            return self._voice

    def _cached_codes(self) -> Voice | None:
        """wyoming-piper's ref.rvq, where it is not older than the clip (its own rule for a fresh cache)."""
        codes, clip = self.folder / CODES, self.folder / CLIP
        try:
            if not codes.is_file() or codes.stat().st_mtime < clip.stat().st_mtime:
                return None
            voice = Voice.load(codes)
        except (OSError, UserError) as exc:
            logger.warning("--voices-from: encoding %s instead of using %s: %s", clip, codes, exc)
            return None
        logger.info("--voices-from: %s speaks with %s", self.folder.name, codes)
        return voice

    def _encoded(self, tts) -> Voice:
        clip = self.folder / CLIP
        with open(clip, "rb") as f:
            data = f.read(MAX_CLIP_BYTES + 1)
        if len(data) > MAX_CLIP_BYTES:
            raise UserError(f"its clip is over {MAX_CLIP_BYTES} bytes; trim it")
        key = json.dumps({"build": self.build_id, "text": self.text}, sort_keys=True, ensure_ascii=False)
        path = self.cache / (f"{hashlib.sha256(data).hexdigest()[:32]}-"
                             f"{hashlib.sha256(key.encode()).hexdigest()[:8]}.npz")
        damaged = False
        if path.is_file():
            try:
                return Voice.load(path)
            except UserError as exc:
                logger.warning("--voices-from: encoding %s again: %s", clip, exc)
                damaged = True  # ours, so replaced
        wav, rate = audio.read_clip(data, MAX_CLIP_SECONDS)
        voice = tts.create_voice((wav, rate), self.text)
        self.cache.mkdir(parents=True, exist_ok=True)
        try:
            voice.save(path, exclusive=not damaged)
            write_json_atomic(path.with_suffix(".json"), {"source": str(self.folder), "text": self.text,
                                                          "build": self.build_id})
        except FileExistsError:  # another server on this folder encoded it first; the codes are the same
            pass
        except OSError as exc:
            logger.warning("--voices-from: cannot keep %s (%s); it is encoded again after a restart", path, exc.strerror)
        logger.info("--voices-from: encoded %s (%d frames) -> %s", clip, voice.codes.shape[1], path)
        return voice


def encode_imported(imported: dict[str, ImportedVoice], model: PinEngine) -> None:
    """Every imported clone made ready in the background, as the server starts: one at a time on the
    codec's pool (its one worker), each queued when the one before is done, so a request's decode waits
    behind one clip at most. A clip that fails is logged here and refused when a request names it."""
    clones = [(vid, voice.clone) for vid, voice in imported.items() if voice.clone is not None]

    def prepare(index: int) -> None:
        vid, clone = clones[index]
        try:
            clone(model.tts)
        except UserError:  # logged with its folder; a request that names it is refused
            pass
        except Exception:  # the codec failed: the next request that names it tries again
            logger.exception("--voices-from: encoding %r failed", vid)

    def queue(index: int) -> None:
        if index < len(clones):
            try:
                done = model.decode_pool.submit(prepare, index)
            except RuntimeError:  # the pool is shut down: the server is stopping
                return
            done.add_done_callback(lambda _: queue(index + 1))

    queue(0)


# --- uploads and exports ---------------------------------------------------------------------------

def is_voice_file_name(filename) -> bool:
    """An upload named *.pt, *.npz or *.rvq is a voice file (codes, transcript, RMS), not a clip."""
    return isinstance(filename, str) and Path(filename).suffix.lower() in VOICE_FILE_SUFFIXES


def read_voice_file(data: bytes, vid: str, limits: Limits) -> Voice:
    """An uploaded voice file as a Voice, held to the limits an uploaded clip and its transcript are
    held to (its tokens ride along in every step that clones it); a UserError naming the voice for
    anything else (nothing in it runs)."""
    if len(data) > MAX_FILE_BYTES:
        raise UserError(f"voice file {vid!r} is over {MAX_FILE_BYTES} bytes; a voice is a few KB")
    try:
        voice = Voice.from_bytes(data, repr(vid))
    except UserError as exc:
        problem = getattr(exc, "problem", "") or "it is neither our .npz nor upstream's .pt"
        raise UserError(f"voice file {vid!r} cannot be used: {problem}; send one that inference.py "
                        "--save_voice or upstream's VoiceClonePrompt.save wrote") from None
    seconds = voice.codes.shape[1] / FRAME_RATE
    if seconds > limits.max_ref_seconds_upload:
        raise UserError(f"voice file {vid!r} holds {seconds:.1f} s of reference; the limit is "
                        f"{limits.max_ref_seconds_upload:g} s ({flag('max_ref_seconds_upload')}): save a shorter one")
    if len(voice.text) > limits.max_transcript_chars:
        raise UserError(f"voice file {vid!r} has a transcript of {len(voice.text)} characters; the limit is "
                        f"{limits.max_transcript_chars} ({flag('max_transcript_chars')})")
    return voice


async def export_voice(voices: Voices, model: PinEngine, vid: str, kind: str) -> bytes:
    """Any voice's file: upstream's .pt (VoiceClonePrompt.load reads it) or our .npz. A design voice
    exports its pin (pinned now if it is not yet); 404 an unknown voice, 400 an unknown format."""
    if kind not in EXPORT_FORMATS:
        raise RequestError(400, f"format must be one of {', '.join(EXPORT_FORMATS)}, got {kind[:20]!r}", "format")
    try:
        voice = await voices.whole(model, vid)
    except UnknownVoice as exc:
        raise RequestError(404, str(exc), "voice", "voice_not_found") from None
    except QueueFull:  # pinning a design voice found the queue full: a 429, as for speech
        raise
    except UserError as exc:
        raise RequestError(400, str(exc), "voice", "voice_unreadable") from None
    return await asyncio.get_running_loop().run_in_executor(None, voice.to_bytes, kind)
