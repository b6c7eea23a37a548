"""Find and check an OmniVoice checkpoint: a local folder, a cached hub id, or a generated one.

Layout (upstream's, hub `k2-fsa/OmniVoice`): config.json, model.safetensors,
tokenizer files, and audio_tokenizer/ (Higgs config, weights, preprocessor_config.json).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from codes.common.errors import UserError
from codes.common.fileio import sha256_file
from codes.export.generated import GENERATED

DEFAULT_HUB_ID = "k2-fsa/OmniVoice"

BACKBONE_FILES = ("config.json",)
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json")
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json")
HIGGS_FILES = ("config.json", "model.safetensors", "preprocessor_config.json")


@dataclass
class Checkpoint:
    path: Path
    identity: dict = field(default_factory=dict)

    @property
    def higgs_path(self) -> Path:
        return self.path / "audio_tokenizer"

    def tokenizer_files(self) -> list[Path]:
        """The text tokenizer files a build copies next to its graphs."""
        names = TOKENIZER_FILES + ("special_tokens_map.json", "vocab.json", "merges.txt", "added_tokens.json")
        return [self.path / n for n in names if (self.path / n).is_file()]


def _missing(folder: Path, names) -> list[str]:
    return [n for n in names if not (folder / n).is_file()]


def check_layout(path: Path, need_backbone: bool = True, need_higgs: bool = False) -> None:
    """Raise a one-line UserError naming the first file a build would miss."""
    if need_backbone:
        missing = _missing(path, BACKBONE_FILES + TOKENIZER_FILES)
        if not any((path / n).is_file() for n in WEIGHT_FILES):
            missing.append("model.safetensors")
        if missing:
            raise UserError(
                f"checkpoint {path} is incomplete: missing {', '.join(missing)}; "
                "pass a folder in upstream's layout (config.json, model.safetensors, tokenizer.json, audio_tokenizer/)"
            )
        config = json.loads((path / "config.json").read_text())
        if config.get("model_type") != "omnivoice":
            raise UserError(
                f"{path / 'config.json'} has model_type {config.get('model_type')!r}, not 'omnivoice'; "
                "pass an OmniVoice checkpoint"
            )
    if need_higgs:
        missing = _missing(path / "audio_tokenizer", HIGGS_FILES)
        if missing:
            raise UserError(
                f"checkpoint {path} has no complete audio_tokenizer/ (missing {', '.join(missing)}); "
                "the Higgs codec build needs it"
            )


def _resolve_hub(repo_id: str, flag: str = "--model") -> Path:
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError) as exc:
        raise UserError(
            f"'{repo_id}' is neither a local folder nor in the local Hugging Face cache "
            f"(this toolkit never downloads); pass a local checkpoint directory with {flag} DIR"
        ) from exc


def identity_of(path: Path) -> dict:
    weights = next((path / n for n in WEIGHT_FILES if (path / n).is_file()), None)
    return {
        "kind": "local",
        "path": str(path.resolve()),
        "config_sha256": sha256_file(path / "config.json"),
        "weights_sha256": sha256_file(weights) if weights and weights.stat().st_size < (4 << 30) else None,
    }


def resolve_checkpoint(model: str, need_backbone: bool = True, need_higgs: bool = False) -> Checkpoint:
    """Turn --model into a checked local folder. Generated models are made (once) in the cache."""
    if model in GENERATED:
        ckpt = generated_checkpoint(model)
    elif Path(model).exists():
        path = Path(model)
        if not path.is_dir():
            raise UserError(f"--model {model} is a file; pass the checkpoint folder that holds config.json")
        ckpt = Checkpoint(path, identity_of(path))
    elif model.count("/") == 1 and not model.startswith((".", "/")):
        path = _resolve_hub(model)
        ckpt = Checkpoint(path, {**identity_of(path), "kind": "hub", "repo_id": model, "revision": path.name})
    else:
        raise UserError(f"--model {model}: no such folder; pass a checkpoint folder, a cached hub id or one "
                        f"of {', '.join(GENERATED)}")
    check_layout(ckpt.path, need_backbone=need_backbone, need_higgs=need_higgs)
    return ckpt


def generated_checkpoint(name: str, seed: int = 0) -> Checkpoint:
    """One of GENERATED (`tiny-random`, `full-random`, `tiny-outlier`, ...), made once into the cache."""
    from codes.export.generated import generated_folder

    return Checkpoint(*generated_folder(name, seed))


def load_omnivoice(path: Path):
    """Upstream's model on CPU in fp32 with SDPA attention (eager ignores the padding mask, docs/DESIGN.md §sdpa)."""
    import torch
    from omnivoice.models.omnivoice import OmniVoice

    # train=True loads the model alone, without the tokenizers and codec that export never needs.
    model = OmniVoice.from_pretrained(str(path), train=True, attn_implementation="sdpa", dtype=torch.float32)
    return model.eval()
