"""A voice: a reusable clone prompt (reference codes, their transcript, the clip's loudness), and its files:
ours (.npz), upstream's VoiceClonePrompt (.pt) and wyoming-piper's ref.rvq (codes/runtime/voices/prompt_file.py)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.common.fileio import atomic_path
from codes.runtime.voices import prompt_file
from codes.runtime.voices.prompt import check_ref_codes

VOICE_FORMAT_VERSION = 1


@dataclass
class Voice:
    """A reusable clone prompt (upstream's VoiceClonePrompt): reference codes, transcript and RMS."""

    codes: np.ndarray  # [8, T_ref] int64
    text: str
    rms: float | None  # None: a synthesized reference, which sets no loudness

    def save(self, path: str | Path, exclusive: bool = False) -> None:
        """Written whole or not at all; `exclusive`: FileExistsError rather than replacing a file.
        A path ending in .pt gets upstream's format (VoiceClonePrompt.load reads it), any other our .npz."""
        path = Path(path)
        if path.suffix.lower() == prompt_file.SUFFIX:
            with atomic_path(path, exclusive=exclusive) as tmp:
                tmp.write_bytes(self.to_bytes("pt"))
            return
        with atomic_path(path, suffix=".npz", exclusive=exclusive) as tmp:
            tmp.write_bytes(self.to_bytes("npz"))

    def to_bytes(self, kind: str = "npz") -> bytes:
        """The file's bytes: "npz", ours, or "pt", upstream's VoiceClonePrompt.save."""
        if kind == "pt":
            return prompt_file.prompt_bytes(self.codes, self.text, self.rms)
        buffer = io.BytesIO()
        np.savez(buffer, codes=self.codes, text=np.array(self.text),
                 rms=np.array(np.nan if self.rms is None else self.rms, dtype=np.float64),
                 format_version=np.array(VOICE_FORMAT_VERSION))
        return buffer.getvalue()

    @classmethod
    def load(cls, path: str | Path) -> Voice:
        """Ours (.npz), upstream's VoiceClonePrompt.save (.pt) or wyoming-piper's ref.rvq, told apart by content."""
        try:
            with open(path, "rb") as f:
                data = f.read(prompt_file.MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise UserError(f"cannot read voice file {path} ({exc.strerror or type(exc).__name__}); "
                            "save one with --save_voice") from None
        return cls.from_bytes(data, str(path))

    @classmethod
    def from_bytes(cls, data: bytes, name: str) -> Voice:
        """A voice file's bytes (see load); `name` is what an error calls it."""
        if prompt_file.is_prompt_file(data):
            return cls(*prompt_file.read_prompt(data, name))
        arrays = prompt_file.read_npz(data, name)
        version, text, rms = arrays["format_version"], arrays["text"], arrays["rms"]
        if version.shape != () or version.dtype.kind not in "iu" or int(version) != VOICE_FORMAT_VERSION:
            raise UserError(f"{name} is a voice file of another format version; save it again with --save_voice")
        if text.shape != () or text.dtype.kind != "U" or rms.shape != () or rms.dtype.kind != "f":
            raise UserError(f"cannot read voice file {name}: its text or rms is not a voice's; save one with --save_voice")
        try:
            codes = check_ref_codes(arrays["codes"])
        except UserError as exc:
            raise UserError(f"cannot read voice file {name}: {exc}") from None
        rms = float(rms)
        return cls(codes, str(text), None if np.isnan(rms) else rms)


def first_chunk_voice(codes: np.ndarray, text: str) -> Voice:
    """Upstream's long-form rule: a first chunk spoken without a voice is the reference of what follows.
    rms None: its loudness is not a reference level."""
    return Voice(codes, text, None)
