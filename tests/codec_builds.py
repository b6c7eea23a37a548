"""The tiny Higgs codec and its ONNX builds, made once per test session.

test_codec.py and test_higgs_inference.py both ask for them; the cache below makes
the second ask free (pytest would otherwise run a session fixture once per module
that defines it).
"""

from __future__ import annotations

from pathlib import Path

_MADE: dict = {}


def tiny_codec_source(tmp_path_factory) -> Path:
    """The tiny codec checkpoint, as `<checkpoint>/audio_tokenizer`."""
    if "source" not in _MADE:
        from codes.export.generated_higgs import write_higgs_checkpoint
        from codes.runtime.specs import HIGGS_DIR

        folder = tmp_path_factory.mktemp("higgs_source") / HIGGS_DIR
        _MADE["source"] = write_higgs_checkpoint(folder, size="tiny", seed=0)
    return _MADE["source"]


def codec_build(tmp_path_factory, precision: str) -> tuple[Path, dict]:
    """(build folder with omnivoice_manifest.json, its "higgs" section), made as --higgs-only makes it."""
    if precision not in _MADE:
        from codes.export.build import BuildRequest, build
        from codes.export.checkpoint import Checkpoint
        from codes.export.profiles import get_profile
        from codes.runtime.manifest import read_manifest

        checkpoint = Checkpoint(tiny_codec_source(tmp_path_factory).parent, {"kind": "tiny-codec"})
        folder = tmp_path_factory.mktemp(f"higgs_{precision}") / "build"
        build(BuildRequest(checkpoint, get_profile("cpu"), folder, higgs_only=True, higgs_precision=precision,
                           log=lambda *_: None))
        _MADE[precision] = (folder, read_manifest(folder).higgs)
    return _MADE[precision]
