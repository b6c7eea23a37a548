"""Which checkpoint a build came from, for the checks that hold it to upstream (eval.py --mode equiv and fidelity)."""

from __future__ import annotations

from pathlib import Path

from codes.common.errors import UserError
from codes.export.checkpoint import GENERATED, generated_checkpoint, resolve_checkpoint
from codes.export.lora import merged_source


def source_of(manifest, source: str | None) -> Path:
    """A build's checkpoint for checks against upstream: --source, else the one its manifest names."""
    if source:
        return resolve_checkpoint(source, need_backbone=False).path
    return recorded_checkpoint(manifest.data.get("source") or {"kind": manifest.data.get("model_id")})  # a published folder's


def recorded_checkpoint(recorded: dict) -> Path:
    """The checkpoint a manifest's `source` names: generated ones are regenerated on demand, and a build with a
    LoRA adapter gets its base with the adapter merged again (once, into the cache)."""
    if recorded.get("lora"):
        return merged_source(recorded_checkpoint({k: v for k, v in recorded.items() if k != "lora"}), recorded["lora"])
    if recorded.get("kind") in GENERATED:
        return generated_checkpoint(recorded["kind"], seed=recorded.get("seed", 0)).path
    path = recorded.get("path")
    if path and Path(path).is_dir():
        return Path(path)
    if recorded.get("kind") and "/" in recorded["kind"]:  # a hub id, looked up in the local cache only
        try:
            return resolve_checkpoint(recorded["kind"], need_backbone=False).path
        except UserError:
            pass
    raise UserError(f"the checkpoint this build came from ({path or recorded}) is not here; pass it with --source DIR")
