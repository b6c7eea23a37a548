"""The tiny Higgs codec and its ONNX builds, made once per test session.

test_codec.py and test_higgs_inference.py both ask for them; the cache below makes
the second ask free (pytest would otherwise run a session fixture once per module
that defines it).
"""

from __future__ import annotations

from pathlib import Path

_MADE: dict = {}


def tiny_codec_source(tmp_path_factory) -> Path:
    if "source" not in _MADE:
        from codes.export.generated_higgs import write_higgs_checkpoint

        _MADE["source"] = write_higgs_checkpoint(tmp_path_factory.mktemp("higgs_source"), size="tiny", seed=0)
    return _MADE["source"]


def codec_build(tmp_path_factory, precision: str) -> tuple[Path, dict]:
    """(build folder with omnivoice_manifest.json, its "higgs" section), as --higgs-only lays it out."""
    if precision not in _MADE:
        from codes.export.higgs import build_higgs
        from codes.runtime.manifest import write_manifest
        from codes.runtime.specs import HIGGS_DIR

        source = tiny_codec_source(tmp_path_factory)
        folder = tmp_path_factory.mktemp(f"higgs_{precision}")
        section = build_higgs(source, folder / HIGGS_DIR, precision, log=lambda *_: None)
        write_manifest(folder, {"higgs": section})
        _MADE[precision] = (folder, section)
    return _MADE[precision]
