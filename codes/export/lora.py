"""Fine-tuned checkpoints: a PEFT LoRA adapter merged into its base before export.

Upstream's fine-tuning (k2-fsa/OmniVoice #243) saves PEFT folders: adapter_config.json and
adapter_model.safetensors, with LoRA pairs on the backbone's linear layers and the audio
embeddings and heads saved whole (modules_to_save). Its omnivoice-merge-lora merges them with
PEFT (PeftModel.from_pretrained(base).merge_and_unload()) into an ordinary checkpoint; the build
does the same in its work folder, so the graphs are the merged model's. PEFT is a build-time
dependency only. The adapter's tokenizer is used if it has one (training checkpoints save it,
and it differs from the base's only where tokens were added).
"""

from __future__ import annotations

import json
from pathlib import Path

from codes.common.errors import UserError
from codes.common.fileio import sha256_file
from codes.export.checkpoint import TOKENIZER_FILES, WEIGHT_FILES, Checkpoint

ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
PEFT_PREFIX = "base_model.model."  # how PEFT names the wrapped model's tensors in an adapter
LORA_SUFFIXES = (".lora_A.weight", ".lora_B.weight")


def _shapes(files: list[Path]) -> dict[str, list[int]]:
    from safetensors import safe_open

    shapes = {}
    for file in files:
        with safe_open(str(file), "np") as handle:
            shapes.update({key: list(handle.get_slice(key).get_shape()) for key in handle.keys()})
    return shapes


def _base_shapes(base: Path) -> dict[str, list[int]]:
    index = base / WEIGHT_FILES[1]
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return _shapes([base / shard for shard in shards])
    return _shapes([base / WEIGHT_FILES[0]])


def _expected_shape(key: str, base: dict[str, list[int]], rank: int) -> tuple[str, list[int] | None]:
    """The base tensor an adapter tensor belongs to, and the shape the adapter's must have."""
    for suffix, make in zip(LORA_SUFFIXES, (lambda out, inp: [rank, inp], lambda out, inp: [out, rank])):
        if key.endswith(suffix):
            target = key[: -len(suffix)] + ".weight"
            shape = base.get(target)
            return target, make(*shape) if shape is not None and len(shape) == 2 else None
    return key, base.get(key)


def check_adapter(adapter: Path, base: Path) -> dict:
    """Refuse in one line an adapter folder that cannot merge into the checkpoint at `base`; returns its config."""
    adapter = Path(adapter)
    if not adapter.is_dir():
        raise UserError(f"--lora {adapter}: no such folder; pass a PEFT adapter folder ({', '.join(ADAPTER_FILES)})")
    missing = [name for name in ADAPTER_FILES if not (adapter / name).is_file()]
    if missing:
        raise UserError(f"--lora {adapter} is missing {', '.join(missing)}; pass the folder a LoRA training "
                        "checkpoint saved (adapter_config.json beside adapter_model.safetensors)")
    try:
        config = json.loads((adapter / ADAPTER_FILES[0]).read_text(encoding="utf-8"))
    except ValueError as exc:
        raise UserError(f"--lora {adapter}/adapter_config.json is not JSON ({exc}); the adapter is damaged") from None
    if not isinstance(config, dict) or config.get("peft_type") != "LORA":
        raise UserError(f"--lora {adapter}: peft_type is {config.get('peft_type') if isinstance(config, dict) else None!r}, "
                        "not LORA; only LoRA adapters merge into a checkpoint")
    try:
        tensors = _shapes([adapter / ADAPTER_FILES[1]])
    except Exception as exc:  # safetensors raises its own error types for a damaged header
        raise UserError(f"--lora {adapter}/adapter_model.safetensors cannot be read ({exc}); the adapter is damaged") from None
    shapes = _base_shapes(base)
    rank = int(config.get("r", 0))
    for key, shape in sorted(tensors.items()):
        if not key.startswith(PEFT_PREFIX):
            raise UserError(f"--lora {adapter}: tensor {key} is not in PEFT's layout ({PEFT_PREFIX}...); "
                            "pass an adapter saved by PEFT")
        target, expected = _expected_shape(key[len(PEFT_PREFIX):], shapes, rank)
        if target not in shapes:
            raise UserError(f"--lora {adapter}: {key} adapts {target}, which the checkpoint {base} does not have; "
                            "the adapter was trained for another model")
        if shape != expected:
            raise UserError(f"--lora {adapter}: {key} is {shape} but {target} of {base} needs {expected}; the adapter "
                            "was trained for another model shape")
    return config


def merge_adapter(base: Checkpoint, adapter: Path, out_dir: Path, log=print) -> Checkpoint:
    """`base` with the adapter merged in, as a checkpoint folder in `out_dir` (its weights, config and tokenizer,
    and the base's codec linked): what the build exports instead of the base."""
    import shutil

    from peft import PeftModel

    from codes.common.quiet import library_output
    from codes.export.checkpoint import load_omnivoice

    adapter = Path(adapter)
    config = check_adapter(adapter, base.path)
    out_dir = Path(out_dir)
    with library_output("merging the LoRA adapter"):
        merged = PeftModel.from_pretrained(load_omnivoice(base.path), str(adapter)).merge_and_unload()
        merged.save_pretrained(str(out_dir))
    own_tokenizer = all((adapter / name).is_file() for name in TOKENIZER_FILES)
    for source in Checkpoint(adapter if own_tokenizer else base.path).tokenizer_files():
        shutil.copy2(source, out_dir / source.name)
    if base.higgs_path.is_dir():
        (out_dir / "audio_tokenizer").symlink_to(base.higgs_path.resolve(), target_is_directory=True)
    log(f"merged the LoRA adapter {adapter} (rank {config.get('r')}, {len(config.get('target_modules') or [])} "
        f"target modules{', its own tokenizer' if own_tokenizer else ''}) into {base.path.name}")
    identity = {**base.identity, "lora": {"path": str(adapter.resolve()), "rank": config.get("r"),
                                          "adapter_sha256": sha256_file(adapter / ADAPTER_FILES[1]),
                                          "tokenizer": "adapter's" if own_tokenizer else "base's"}}
    return Checkpoint(out_dir, identity)


def merged_source(base: Path, lora: dict) -> Path:
    """The checkpoint a LoRA build was exported from, for checks against upstream: its base with the adapter (as
    the manifest's source.lora names it) merged again, once per adapter and base, into the cache."""
    from codes.common.cache import cache_dir
    from codes.export.checkpoint import identity_of
    from codes.export.generated import generate_once

    adapter = Path(lora["path"])
    if not (adapter / ADAPTER_FILES[1]).is_file() or sha256_file(adapter / ADAPTER_FILES[1]) != lora["adapter_sha256"]:
        raise UserError(f"the LoRA adapter this build merged ({adapter}) is not here as it was; pass the merged "
                        "checkpoint with --source DIR")
    final = cache_dir("lora-merged") / f"{lora['adapter_sha256'][:16]}-{identity_of(base)['config_sha256'][:16]}"
    generate_once(final, "the merged checkpoint",
                  lambda folder: merge_adapter(Checkpoint(base, identity_of(base)), adapter, folder, log=lambda line: None))
    return final
