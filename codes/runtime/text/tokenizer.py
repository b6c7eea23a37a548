"""OmniVoice's text tokenizer at runtime: tokenizer.json through the `tokenizers` library alone."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer

from codes.common.errors import UserError


class TextTokenizer:
    """Qwen3 byte-level BPE with OmniVoice's tags; ids equal upstream's AutoTokenizer ids."""

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer

    @classmethod
    def from_file(cls, path: str | Path) -> TextTokenizer:
        path = Path(path)
        if not path.is_file():
            raise UserError(f"tokenizer file {path} not found; point at a built model folder")
        try:
            return cls(Tokenizer.from_file(str(path)))
        except Exception as exc:  # tokenizers raises a bare Exception for unreadable JSON
            raise UserError(f"cannot read tokenizer file {path}: {exc}; rebuild the model folder") from None

    @classmethod
    def from_dir(cls, model_dir: str | Path) -> TextTokenizer:
        return cls.from_file(Path(model_dir) / "tokenizer.json")

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        # Qwen's post-processor adds no BOS/EOS, so this also equals upstream's default call.
        return self._tokenizer.encode(text, add_special_tokens=False).ids

    def token_id(self, token: str) -> int:
        token_id = self._tokenizer.token_to_id(token)
        if token_id is None:
            raise UserError(f"token {token!r} is not in the tokenizer vocabulary; is this an OmniVoice model folder?")
        return token_id

    def decode(self, ids: Iterable[int], skip_special_tokens: bool = False) -> str:
        # `tokenizers` skips special tokens by default; transformers (and a round trip) keeps them.
        return self._tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)


def byte_alphabet() -> list[str]:
    """GPT-2's byte -> printable character map, the alphabet of byte-level BPE vocabularies."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    alphabet = {b: chr(b) for b in printable}
    shifted = (b for b in range(256) if b not in alphabet)
    for offset, b in enumerate(shifted):
        alphabet[b] = chr(256 + offset)
    return [alphabet[b] for b in range(256)]
