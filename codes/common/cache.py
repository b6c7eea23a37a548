"""Where generated artefacts (tokenizer files, random checkpoints) are kept between runs."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    root = Path(os.environ.get("OMNIVOICE_ONNX_CACHE") or Path.home() / ".cache" / "omnivoice-onnx")
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
