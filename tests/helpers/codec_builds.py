"""The tiny Higgs codec and its ONNX builds, made once per run.

test_codec.py and test_higgs_inference.py both ask for them, maybe on two xdist workers: the first
to ask makes each under a lock in the run's shared folder, and the cache below makes a second ask in
the same process free (pytest would otherwise run a session fixture once per module that defines it).
"""

from __future__ import annotations

from pathlib import Path

_MADE: dict = {}


def tiny_codec_source(tmp_path_factory) -> Path:
    """The tiny codec checkpoint, as `<checkpoint>/audio_tokenizer`."""
    if "source" not in _MADE:
        from codes.export.generated_higgs import write_higgs_checkpoint
        from codes.runtime.contract.specs import HIGGS_DIR
        from helpers.builds import one_at_a_time, shared_folder

        folder = shared_folder(tmp_path_factory) / "higgs_source" / HIGGS_DIR
        with one_at_a_time(folder.parent.with_name("higgs_source.lock")):
            made = folder.parent.with_name("higgs_source.made")
            if not made.is_file():
                write_higgs_checkpoint(folder, size="tiny", seed=0)
                made.touch()
        _MADE["source"] = folder
    return _MADE["source"]


def codec_build(tmp_path_factory, precision: str) -> tuple[Path, dict]:
    """(build folder with omnivoice_manifest.json, its "higgs" section), made as --higgs-only makes it, once
    for every worker of the run (the first to ask builds it, under the lock)."""
    if precision not in _MADE:
        from codes.export.build import BuildRequest, build
        from codes.export.checkpoint import Checkpoint
        from codes.export.profiles import get_profile
        from codes.runtime.contract.manifest import read_manifest
        from helpers.builds import one_at_a_time, shared_folder

        folder = shared_folder(tmp_path_factory) / f"higgs_{precision}" / "build"
        made = folder.with_name("build.made")
        with one_at_a_time(folder.with_name("build.lock")):
            if not made.is_file():
                checkpoint = Checkpoint(tiny_codec_source(tmp_path_factory).parent, {"kind": "tiny-codec"})
                build(BuildRequest(checkpoint, get_profile("cpu"), folder, higgs_only=True,
                                   higgs_precision=precision, log=lambda *_: None))
                made.touch()
        _MADE[precision] = (folder, read_manifest(folder).higgs)
    return _MADE[precision]
