"""The resolver: the one way a door (HTTP, Wyoming, MCP) turns a voice name into a voice. A request's
own clip, a design voice (built in or imported), pinned; a saved or imported clone, trimmed to
--max-ref-seconds where asked.
"""

from __future__ import annotations

import asyncio
from typing import Protocol

from codes.common.errors import UserError
from codes.runtime.request import Voice
from codes.runtime.text.cleanup import contains_chinese
from codes.runtime.text.voice_design import resolve_instruct
from codes.runtime.voices.reference import trim_voice
from codes.serve.voices.book import DESIGN_VOICES, VoiceBook
from codes.serve.voices.pins import DesignPins, PinEngine


class OneOffSource(Protocol):
    """A request's own clip (codes/serve/voices/uploads.py OneOffClip): encoded for that request, kept nowhere."""

    async def voice(self, model: PinEngine) -> Voice: ...


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
