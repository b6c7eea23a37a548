"""One build: checkpoint -> ONNX graphs -> manifest, in a staging folder swapped in at the end.

An interrupted or failed build leaves the previous output untouched and no
manifest pointing at missing files; re-running the same command is safe.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from codes.runtime import specs
from codes.export.checkpoint import Checkpoint, load_omnivoice
from codes.common.errors import UserError
from codes.runtime.manifest import MANIFEST_NAME, write_manifest
from codes.export.profiles import Profile
from codes.export.lookup_tables import lookup_tables_to_fp16
from codes.export.olive_build import olive_export
from codes.export.onnx_io import files_of, graph_io

# Olive loaders and dummy-input functions in user_script.py, per sub-model.
OLIVE_ENTRY_POINTS = {
    "audio_embeddings_encoder": ("load_audio_embeddings_encoder", "audio_embeddings_encoder_inputs"),
    "audio_heads_decoder": ("load_audio_heads_decoder", "audio_heads_decoder_inputs"),
    "llm_decoder": ("load_llm_backbone", "llm_backbone_inputs"),
}
LLM_EXPORTS = ("genai", "torch")


@dataclass
class BuildRequest:
    checkpoint: Checkpoint
    profile: Profile
    output: Path
    llm_export: str | None = None  # None: the profile's default
    include_higgs: bool = False
    higgs_only: bool = False
    higgs_precision: str = "fp16"
    overwrite: bool = False
    timings: dict = field(default_factory=dict)

    @property
    def llm_method(self) -> str:
        return self.llm_export or self.profile.llm_export


def check_output(output: Path, overwrite: bool) -> None:
    if output.exists() and not output.is_dir():
        raise UserError(f"--output {output} is a file; pass a folder path")
    if output.is_dir() and any(output.iterdir()) and not overwrite:
        what = "an older build" if (output / MANIFEST_NAME).is_file() else "files"
        raise UserError(f"--output {output} already holds {what}; pass --overwrite to replace it, or choose another folder")
    parent = output.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    if not os.access(parent, os.W_OK):
        raise UserError(f"cannot write into {parent}; choose an --output folder you can write to")


def quiet_libraries() -> None:
    """Per-tensor progress bars from transformers drown the build's own report."""
    import warnings

    import transformers

    # omnivoice imports pydub, which warns about ffmpeg; nothing here decodes compressed audio with it.
    warnings.filterwarnings("ignore", message="Couldn't find ffmpeg")

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()


def build(request: BuildRequest) -> Path:
    """Run the whole build and return the output folder."""
    quiet_libraries()
    output = Path(request.output)
    if request.llm_method not in LLM_EXPORTS:
        raise UserError(f"--llm-export {request.llm_method!r} is not one of {', '.join(LLM_EXPORTS)}")
    if request.higgs_precision not in ("fp16", "fp32"):
        raise UserError(f"--higgs-precision {request.higgs_precision!r}: the codec builds in fp16 or fp32, never int4")
    check_output(output, request.overwrite)
    staging = Path(tempfile.mkdtemp(prefix=f".{output.name}.building-", dir=output.resolve().parent))
    staging.chmod(0o755)  # mkdtemp makes it private; a build folder is meant to be shared
    work = Path(tempfile.mkdtemp(prefix="omnivoice-onnx-work-"))
    try:
        body = {}
        if not request.higgs_only:
            body.update(_build_backbone(request, staging, work))
        if request.include_higgs or request.higgs_only:
            body["higgs"] = _build_higgs(request, staging)
        body.update(_describe(request))
        write_manifest(staging, body)
        _swap_in(staging, output)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return output


def _timed(request: BuildRequest, key: str, fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    request.timings[key] = round(time.perf_counter() - start, 2)
    return result


def _build_backbone(request: BuildRequest, staging: Path, work: Path) -> dict:
    ckpt, profile = request.checkpoint, request.profile
    config = json.loads((ckpt.path / "config.json").read_text())
    hidden = config["llm_config"]["hidden_size"]
    sub_models = {}
    for spec, precision in ((specs.embeddings_spec(hidden), profile.embeddings_precision),
                            (specs.heads_spec(hidden), profile.heads_precision)):
        loader, dummy = OLIVE_ENTRY_POINTS[spec.key]
        if spec.key == "audio_embeddings_encoder" and precision == "fp16":  # fp16 tables, fp32 maths
            path = _timed(request, spec.key, olive_export, spec, ckpt.path, loader, dummy, "fp32", staging, work,
                          transform=lookup_tables_to_fp16)
        else:
            path = _timed(request, spec.key, olive_export, spec, ckpt.path, loader, dummy, precision, staging, work)
        sub_models[spec.key] = _sub_model_entry(path, staging, precision, "olive")

    spec = specs.backbone_spec(hidden)
    if request.llm_method == "genai":
        from codes.export.llm_genai import build_llm_genai

        omnivoice = load_omnivoice(ckpt.path)
        path = _timed(request, spec.key, build_llm_genai, omnivoice, staging, work,
                      profile.llm_precision, profile.genai_target)
        how = "onnxruntime-genai create_model (exclude_embeds, exclude_lm_head), GQA patched to causal=0 + attention_bias"
    else:
        loader, dummy = OLIVE_ENTRY_POINTS[spec.key]
        path = _timed(request, spec.key, olive_export, spec, ckpt.path, loader, dummy,
                      profile.llm_precision, staging, work)
        how = "torch.onnx.export (legacy, via Olive OnnxConversion) with the 4-D bool mask"
    sub_models[spec.key] = _sub_model_entry(path, staging, profile.llm_precision, request.llm_method)
    sub_models[spec.key]["build"] = how

    tokenizer_files = []
    for source in ckpt.tokenizer_files():
        shutil.copy2(source, staging / source.name)
        tokenizer_files.append(source.name)
    return {
        "sub_models": sub_models,
        "tokenizer": {"files": tokenizer_files, "special_tokens": _special_tokens(staging)},
        "model": _model_facts(config),
    }


def _build_higgs(request: BuildRequest, staging: Path) -> dict:
    from codes.export.higgs import build_higgs

    section = _timed(request, "higgs", build_higgs, request.checkpoint.higgs_path,
                     staging / specs.HIGGS_DIR, request.higgs_precision)
    return section


def _sub_model_entry(path: Path, folder: Path, precision: str, built_with: str) -> dict:
    inputs, outputs, opsets = graph_io(path)
    files = files_of(path)
    return {
        "filename": path.relative_to(folder).as_posix(),
        "external_data": [f.relative_to(folder).as_posix() for f in files[1:]],
        "precision": precision,
        "built_with": built_with,
        "inputs": inputs,
        "outputs": outputs,
        "opset": opsets,
        "size_bytes": sum(f.stat().st_size for f in files),
    }


def _special_tokens(folder: Path) -> dict[str, int]:
    from codes.runtime.text_tokenizer import TextTokenizer
    from codes.export.tokenizer_build import OMNIVOICE_SPECIAL_TOKENS

    tokenizer = TextTokenizer.from_dir(folder)
    return {token: tokenizer.token_id(token) for token in OMNIVOICE_SPECIAL_TOKENS}


def _model_facts(config: dict) -> dict:
    llm = config["llm_config"]
    return {
        "hidden_size": llm["hidden_size"],
        "num_hidden_layers": llm["num_hidden_layers"],
        "num_attention_heads": llm["num_attention_heads"],
        "num_key_value_heads": llm["num_key_value_heads"],
        "head_dim": llm.get("head_dim") or llm["hidden_size"] // llm["num_attention_heads"],
        "text_vocab_size": llm["vocab_size"],
    }


def _describe(request: BuildRequest) -> dict:
    from codes.runtime.settings import GenerationSettings

    profile = request.profile
    ckpt_id = request.checkpoint.identity
    model_id = ckpt_id.get("repo_id") or (ckpt_id["kind"] if ckpt_id.get("kind") != "local" else request.checkpoint.path.name)
    body = {
        "model_id": model_id,
        "source": ckpt_id,
        "profile": profile.name,
        "execution_provider": profile.execution_provider,
        "audio": {
            "num_codebooks": specs.NUM_CODEBOOKS,
            "audio_vocab_size": specs.AUDIO_VOCAB_SIZE,
            "mask_id": specs.AUDIO_MASK_ID,
            "codebook_weights": list(specs.CODEBOOK_WEIGHTS),
            "sample_rate": specs.SAMPLE_RATE,
            "frame_rate": specs.FRAME_RATE,
            "hop_length": specs.HOP_LENGTH,
        },
        "decoding_defaults": GenerationSettings().to_dict(),
        "build_seconds": dict(request.timings),
    }
    if not request.higgs_only:
        body.update({
            "precision": {"llm": profile.llm_precision, "embeddings": profile.embeddings_precision,
                          "heads": profile.heads_precision},
            "attention": "bidirectional",
            "llm_build": request.llm_method,
        })
    return body


def _swap_in(staging: Path, output: Path) -> None:
    """Replace output with staging; the old build is removed only once the new one is in place."""
    old = None
    if output.exists():
        old = output.with_name(f".{output.name}.old-{os.getpid()}")
        os.rename(output, old)
    os.rename(staging, output)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
