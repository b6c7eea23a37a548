"""One build: checkpoint -> ONNX graphs -> manifest, owning exactly the files it writes.

A build has up to three parts: the backbone (the step's graphs and the tokenizer), the Higgs
codec (audio_tokenizer/), the recogniser (asr/) and the aligner (aligner/); each but the backbone carries a manifest
of their own. The build is staged in full beside the output, then its files are moved into place
with the manifests last. Rebuilding replaces only a previous build's own files (those its
manifests list) of the parts it rebuilds: nested builds, the user's files and the parts not
rebuilt are never touched. A file the build would overwrite that no build of ours
wrote is refused unless --overwrite. A failed or interrupted build leaves the previous one
as it was; the staging folder a killed build leaves is removed by the next build beside it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

from codes.common.errors import UserError
from codes.common.quiet import library_output
from codes.export import asr_build, web_site
from codes.export.checkpoint import Checkpoint, load_omnivoice
from codes.export.codec_build import build_codec
from codes.export.glue import build_glue
from codes.export.manifest_write import write_manifest
from codes.export.olive_build import olive_export
from codes.export.onnx_io import files_of, graph_io
from codes.export.profiles import Profile
from codes.export.staging import PREVIOUS, WORK, make_staging, remove_stale
from codes.export.submodels import BACKBONE_GRAPHS, CODEC_GRAPHS, SCORING_GRAPHS
from codes.runtime.contract import specs
from codes.runtime.contract.manifest import CODEC_KIND, FORMAT, MANIFEST_NAME
from codes.runtime.recognition.asr import FORMAT as ASR_FORMAT, MANIFEST_NAME as ASR_MANIFEST_NAME

LLM_EXPORTS = ("genai", "torch")
# ONNX Runtime's CPU GroupQueryAttention (the genai graph's attention) runs only head sizes that are
# multiples of 16; it fails at the first synthesis step otherwise.
GQA_HEAD_SIZE_MULTIPLE = 16
CODEC_MANIFEST = f"{specs.HIGGS_DIR}/{MANIFEST_NAME}"
ASR_MANIFEST = f"{specs.ASR_DIR}/{ASR_MANIFEST_NAME}"
ALIGNER_MANIFEST = f"{specs.ALIGNER_DIR}/{ASR_MANIFEST_NAME}"
PARTS = ("backbone", "codec", "asr", "aligner")


def part_of(name: str) -> str:
    """Which part of a build a file (relative to the build folder) belongs to."""
    folder = name.split("/", 1)[0] if "/" in name else None
    return {specs.HIGGS_DIR: "codec", specs.ASR_DIR: "asr", specs.ALIGNER_DIR: "aligner"}.get(folder, "backbone")


@dataclass
class BuildRequest:
    checkpoint: Checkpoint | None  # None: a recogniser-only build, which reads no OmniVoice checkpoint
    profile: Profile
    output: Path
    llm_export: str | None = None  # None: the profile's default (or torch where genai cannot run)
    include_higgs: bool = False
    higgs_only: bool = False
    higgs_precision: str | None = None  # None: the profile's codec precision
    include_asr: bool = False
    asr_only: bool = False
    asr_model: str = asr_build.DEFAULT_ASR_MODEL
    asr_precision: str | None = None  # None: the profile's (asr_build.profile_precision)
    include_aligner: bool = False
    aligner_only: bool = False
    aligner_model: str | None = None
    aligner_precision: str = "fp32"  # word times equal openai-whisper's in fp32 (bench/words_results.md)
    aligner_heads: list | None = None  # [layer, head] pairs, where the checkpoint names none
    overwrite: bool = False
    lora: Path | None = None  # a PEFT LoRA adapter merged into the checkpoint before export (export/lora.py)
    log: object = print
    timings: dict = field(default_factory=dict)

    @property
    def builds_backbone(self) -> bool:
        return not (self.higgs_only or self.asr_only or self.aligner_only)

    @property
    def builds_codec(self) -> bool:
        return self.include_higgs or self.higgs_only

    @property
    def builds_asr(self) -> bool:
        return self.include_asr or self.asr_only

    def rebuilds(self, part: str) -> bool:
        return {"backbone": self.builds_backbone, "codec": self.builds_codec, "asr": self.builds_asr,
                "aligner": self.builds_aligner}[part]

    @property
    def builds_aligner(self) -> bool:
        return self.include_aligner or self.aligner_only

    @property
    def codec_precision(self) -> str:
        return self.profile.with_codec(self.higgs_precision).precision["codec"]

    @property
    def recogniser_precision(self) -> str:
        return asr_build.profile_precision(self.profile.name, self.asr_precision)

    def summary(self) -> str:
        """What the build holds, in a few words: the profile, or the parts built alone."""
        if self.builds_backbone:
            return self.profile.name
        parts = ([f"codec {self.codec_precision}"] * self.builds_codec
                 + [f"recogniser {self.recogniser_precision}"] * self.builds_asr
                 + [f"aligner {self.aligner_precision}"] * self.builds_aligner)
        return " and ".join(parts) + " only"


def resolve_inputs(request: BuildRequest, model: str) -> None:
    """Check what the build reads before anything is built, and fill in the checkpoint (a recogniser
    alone reads none) and the default output folder."""
    from codes.export.checkpoint import resolve_checkpoint
    from codes.runtime.contract.manifest import default_asr_dir, default_build_dir, default_codec_dir

    if request.builds_asr:
        asr_build.resolve_whisper(request.asr_model)
    if request.builds_aligner:
        if request.aligner_model is None:
            raise UserError("--include-aligner and --aligner-only need --aligner-model: a Whisper checkpoint (folder, hub id in the "
                            "local cache, or tiny-whisper), base or small for speed (docs/build.md)")
        if request.aligner_precision not in asr_build.PRECISIONS:
            raise UserError(f"--aligner-precision {request.aligner_precision} is not one of "
                            f"{', '.join(asr_build.PRECISIONS)}")
        folder = asr_build.resolve_whisper(request.aligner_model)
        config = json.loads((folder / "config.json").read_text())
        asr_build.alignment_heads(folder, config, request.aligner_heads, required=True)  # refused before any work
    if request.builds_backbone or request.builds_codec:
        request.checkpoint = resolve_checkpoint(model, need_backbone=request.builds_backbone,
                                                need_higgs=request.builds_codec)
    if request.lora is not None:
        from codes.export.lora import check_adapter

        if not request.builds_backbone:
            raise UserError("--lora changes the backbone, which --higgs-only, --asr-only and --aligner-only do not "
                            "build; drop one")
        check_adapter(request.lora, request.checkpoint.path)
    if request.output is None:
        request.output = (default_build_dir(request.profile.name) if request.builds_backbone
                          else default_codec_dir(request.codec_precision) if request.builds_codec
                          else default_asr_dir(request.recogniser_precision) if request.builds_asr
                          else Path("models") / f"aligner-{request.aligner_precision}")


@dataclass
class Previous:
    """What builds of ours already own in the output folder: paths relative to it."""

    top: dict | None = None  # the build's manifest, if it is ours
    codec: dict | None = None  # audio_tokenizer/'s own manifest, if it is ours
    asr: dict | None = None  # asr/'s own manifest, if it is ours
    aligner: dict | None = None  # aligner/'s own manifest, if it is ours
    owned: set = field(default_factory=set)

    @classmethod
    def read(cls, output: Path) -> Previous:
        previous = cls(top=_our_manifest(output / MANIFEST_NAME), codec=_our_manifest(output / CODEC_MANIFEST),
                       asr=_our_manifest(output / ASR_MANIFEST, ASR_FORMAT),
                       aligner=_our_manifest(output / ALIGNER_MANIFEST, ASR_FORMAT))
        if previous.top is not None:
            previous.owned |= {MANIFEST_NAME, *previous.top.get("files", {})}
        if previous.codec is not None and previous.codec.get("kind") == CODEC_KIND:
            previous.owned |= {CODEC_MANIFEST, *(f"{specs.HIGGS_DIR}/{n}" for n in previous.codec.get("files", {}))}
        else:
            previous.codec = None
        if previous.asr is not None:
            previous.owned |= set(asr_build.written_files(output / specs.ASR_DIR))
        if previous.aligner is not None:
            previous.owned |= set(asr_build.written_files(output / specs.ALIGNER_DIR))
        return previous


def _our_manifest(path: Path, kind: str = FORMAT) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("format") == kind else None


def build(request: BuildRequest) -> Path:
    """Run the whole build and return the output folder."""
    output = Path(request.output)
    profile = request.profile.with_codec(request.higgs_precision)
    llm_export, llm_reason = _llm_export(request) if request.builds_backbone else (None, None)
    if output.exists() and not output.is_dir():
        raise UserError(f"--output {output} is a file; pass a folder path")
    web = request.builds_backbone and profile.web
    if web:  # node and web/node_modules, before anything is written
        web_site.check_ready()
    previous = Previous.read(output)
    if (request.builds_codec and not request.builds_backbone and not profile.web
            and (previous.top or {}).get("profile") == "web"):
        raise UserError(f"{output} is a web build, whose codec must run on every onnxruntime-web backend: "
                        "pass --device web with --higgs-only")
    _check_collisions(output, _planned_files(request), previous, request.overwrite)
    parent = output.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    if not os.access(parent, os.W_OK):
        raise UserError(f"cannot write into {parent}; choose an --output folder you can write to")

    remove_stale(parent, request.log)
    staging, staging_lock = make_staging(parent, output.name)
    work = staging / WORK  # inside the staging folder, so a killed build's scratch goes with it
    work.mkdir()
    try:
        if request.lora is not None:
            from codes.export.lora import merge_adapter

            request.checkpoint = _timed(request, "lora", merge_adapter, request.checkpoint, request.lora,
                                        work / "merged", log=request.log)
        body, backbone_files, site_files = {}, [], []
        if request.builds_backbone:
            body, backbone_files = _build_backbone(request, profile, llm_export, llm_reason, staging, work)
        elif previous.top is not None and previous.top.get("backbone"):
            body = {k: v for k, v in previous.top.items() if k not in ("format", "format_version", "toolkit_version", "files")}
        if web:  # the site beside the graphs (export/web_site.py)
            site_files = _timed(request, "site", web_site.write_site, staging)
            backbone_files += site_files
        codec_files = []
        if request.builds_codec:
            codec_files = _build_codec(request, profile, staging, work)
            codec_section = json.loads((staging / CODEC_MANIFEST).read_text())["codec"]
        else:
            codec_section = previous.codec["codec"] if previous.codec else None
        asr_files, asr_section = _whisper_part(request, specs.ASR_DIR, staging, work, output, previous.asr)
        aligner_files, aligner_section = _whisper_part(request, specs.ALIGNER_DIR, staging, work, output,
                                                       previous.aligner)
        body.update(_describe(request, profile))
        for key in ("higgs_tokenizer", "asr", "aligner"):
            body.pop(key, None)
        if codec_section is not None:
            body["higgs_tokenizer"] = {"models_dir": specs.HIGGS_DIR, **codec_section}
        if asr_section is not None:
            body["asr"] = asr_section
        if aligner_section is not None:
            body["aligner"] = aligner_section
        if web:
            built = backbone_files + codec_files
            body["web"] = web_site.web_facts(staging, [n for n in built if n.endswith(".onnx")], site_files, built)
        hashes = None  # a backbone build hashes what it wrote; a codec-only one keeps the backbone's hashes
        if not request.builds_backbone:
            kept = (previous.top or {}).get("files", {}) if body.get("backbone") else {}
            hashes = {name: digest for name, digest in kept.items() if part_of(name) == "backbone"}
        write_manifest(staging, body, backbone_files, hashes)
        if request.builds_backbone and profile.quantized:  # measured on the staged build, then recorded
            body["fidelity"] = _timed(request, "fidelity", _fidelity, request, profile, staging)
            write_manifest(staging, body, backbone_files, json.loads((staging / MANIFEST_NAME).read_text())["files"])
        if web:  # every graph loads and runs on onnxruntime-web's WASM backend, or nothing is installed
            body["web"]["probe"] = _timed(request, "probe", web_site.probe_wasm, staging, log=request.log)
            write_manifest(staging, body, backbone_files, json.loads((staging / MANIFEST_NAME).read_text())["files"])
        written = backbone_files + codec_files + asr_files + aligner_files + [MANIFEST_NAME]
        _check_collisions(output, written, previous, request.overwrite)
        shutil.rmtree(work)  # a build killed while installing keeps its staging folder: not the scratch too
        _install(staging, output, written, _stale(previous, written, request))
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        staging_lock.close()
    return output


def _timed(request: BuildRequest, key: str, fn, *args, **kwargs):
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    request.timings[key] = round(time.perf_counter() - start, 2)
    return result


def _llm_export(request: BuildRequest) -> tuple[str, str | None]:
    """The backbone's export path, and why it differs from the profile's, if it does."""
    llm = json.loads((request.checkpoint.path / "config.json").read_text())["llm_config"]
    head_dim = llm.get("head_dim") or llm["hidden_size"] // llm["num_attention_heads"]
    genai_runs = head_dim % GQA_HEAD_SIZE_MULTIPLE == 0
    if request.llm_export is not None:
        if request.llm_export not in LLM_EXPORTS:
            raise UserError(f"--llm-export {request.llm_export!r} is not one of {', '.join(LLM_EXPORTS)}")
        if request.llm_export == "genai" and not genai_runs:
            raise UserError(f"this checkpoint's head_dim is {head_dim}; ONNX Runtime's GroupQueryAttention (the genai "
                            f"graph) runs only multiples of {GQA_HEAD_SIZE_MULTIPLE}: pass --llm-export torch")
        return request.llm_export, None
    if request.profile.llm_export == "genai" and not genai_runs:
        reason = (f"head_dim {head_dim} is not a multiple of {GQA_HEAD_SIZE_MULTIPLE}, which ONNX Runtime's "
                  "GroupQueryAttention needs")
        request.log(f"note: {reason}; exporting the backbone with torch instead (--llm-export torch)")
        return "torch", reason
    return request.profile.llm_export, None


def _planned_files(request: BuildRequest) -> list[str]:
    """The files the build will write (before building: for refusing early)."""
    names = [MANIFEST_NAME]
    if request.builds_backbone:
        step_specs = (*(entry.spec for entry in (*BACKBONE_GRAPHS, *SCORING_GRAPHS)), *specs.GLUE_SPECS)
        names += [n for spec in step_specs for n in (spec.filename, spec.filename + ".data")]
        names += [p.name for p in request.checkpoint.tokenizer_files()]
        if request.profile.web:
            site = web_site.planned_files()
            clash = sorted(set(site) & set(names))
            if clash:
                raise UserError(f"web/site/{clash[0]} has the name of a file the build writes; rename it")
            names += site
    if request.builds_codec:
        names += [f"{specs.HIGGS_DIR}/{n}" for entry in CODEC_GRAPHS
                  for n in (entry.spec.filename, entry.spec.filename + ".data")] + [CODEC_MANIFEST]
    if request.builds_asr:
        names += asr_build.planned_files()
    if request.builds_aligner:
        names += asr_build.planned_files(specs.ALIGNER_DIR)
    return names


def _check_collisions(output: Path, names: list[str], previous: Previous, overwrite: bool) -> None:
    """Refuse to overwrite what no build of ours wrote (unless --overwrite), and never replace a folder."""
    foreign = []
    for name in names:
        path = output / name
        if path.is_dir() or (path.exists() and not path.is_file()):
            raise UserError(f"--output {output}: {name} is a folder, where the build writes a file; "
                            "move it away or choose another folder")
        if path.is_file() and name not in previous.owned:
            foreign.append(name)
    if foreign and not overwrite:
        more = f" (and {len(foreign) - 1} more)" if len(foreign) > 1 else ""
        raise UserError(f"--output {output} holds {foreign[0]}{more}, which no omnivoice-onnx build wrote; "
                        "pass --overwrite to replace those files, or choose another folder")


def _stale(previous: Previous, written: list[str], request: BuildRequest) -> list[str]:
    """Files of the previous build of a rebuilt part that the new build no longer writes."""
    rebuilt = [name for name in previous.owned if request.rebuilds(part_of(name))]
    return sorted(set(rebuilt) - set(written))


def _install(staging: Path, output: Path, names: list[str], stale: list[str]) -> None:
    """Move the staged files into output in order (manifests last). On any failure the files
    already moved are put back as they were."""
    backup = staging / PREVIOUS
    done: list[tuple[Path, Path | None]] = []
    made_dirs: list[Path] = []
    try:
        for name in names:
            target = output / name
            for folder in reversed(target.parents):
                if folder not in made_dirs and not folder.exists():
                    folder.mkdir()
                    made_dirs.append(folder)
            saved = None
            if target.exists():
                saved = backup / name
                saved.parent.mkdir(parents=True, exist_ok=True)
                os.replace(target, saved)
            done.append((target, saved))
            os.replace(staging / name, target)
    except BaseException:
        for target, saved in reversed(done):
            if saved is not None:
                os.replace(saved, target)
            else:
                target.unlink(missing_ok=True)
        for folder in reversed(made_dirs):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        raise
    for name in stale:
        (output / name).unlink(missing_ok=True)


def _quantization(request: BuildRequest, profile: Profile, llm_export: str, work: Path) -> tuple[Path, dict, dict]:
    """What the backbone's int8 needs before export: its calibration (bound into each int8 recipe) and, where
    the scheme folds SmoothQuant in, the smoothed checkpoint the backbone is exported from. Returns the
    backbone's source folder, the recipes by part and the manifest's facts."""
    from codes.export.calibration import calibrate_checkpoint, smoothed_checkpoint
    from codes.export.int8 import quantize_graph

    source = request.checkpoint.path
    recipes = {entry.part: profile.recipe(entry.part, llm_export) for entry in BACKBONE_GRAPHS}
    schemes = {part: recipe.int8 for part, recipe in recipes.items() if recipe.int8 is not None}
    if not schemes:
        return source, recipes, {}
    calibration = None
    if any(scheme.needs_calibration for scheme in schemes.values()):
        with library_output("the int8 calibration"):
            calibration = _timed(request, "calibration", calibrate_checkpoint, source)
        alpha = schemes.get("llm") and schemes["llm"].smooth_alpha
        if alpha:
            with library_output("SmoothQuant"):
                source, calibration = smoothed_checkpoint(source, work / "smoothed", calibration, alpha)
    for part, scheme in schemes.items():
        maxima = calibration.channel_maxima if calibration is not None else None
        recipes[part] = dataclasses.replace(
            recipes[part], transform=lambda model, scheme=scheme, maxima=maxima: quantize_graph(model, scheme, maxima))
    facts = {"int8": {part: scheme.facts() for part, scheme in schemes.items()}}
    if calibration is not None:
        facts["calibration"] = calibration.facts()
    return source, recipes, facts


def _build_backbone(request: BuildRequest, profile: Profile, llm_export: str, llm_reason: str | None,
                    staging: Path, work: Path) -> tuple[dict, list[str]]:
    ckpt = request.checkpoint
    config = json.loads((ckpt.path / "config.json").read_text())
    llm_source, recipes, quantization = _quantization(request, profile, llm_export, work)
    graphs = {}
    for entry in BACKBONE_GRAPHS:
        recipe = recipes[entry.part]
        source = llm_source if entry.part == "llm" else ckpt.path
        if entry.part == "llm" and llm_export == "genai":
            from codes.export.llm_genai import build_llm_genai

            with library_output("the backbone's export"):
                omnivoice = load_omnivoice(source)
                path = _timed(request, entry.key, build_llm_genai, omnivoice, staging, work, recipe,
                              profile.genai_target)
            built_with = "genai"
        else:
            path = _timed(request, entry.key, olive_export, entry, source, recipe, staging, work)
            built_with = "torch" if entry.part == "llm" else "olive"
        graphs[entry.key] = _graph_entry(path, staging, recipe.precision, built_with)
    scoring = {}
    for entry in SCORING_GRAPHS:
        recipe = profile.recipe(entry.part)
        path = _timed(request, entry.key, olive_export, entry, ckpt.path, recipe, staging, work)
        scoring[entry.key] = _graph_entry(path, staging, recipe.precision, "olive")
    glue = {key: _graph_entry(path, staging, "none", "onnx.helper")
            for key, path in build_glue(graphs, config["llm_config"]["hidden_size"], staging).items()}
    llm = graphs[specs.BACKBONE.key]
    llm["build"] = ("onnxruntime-genai create_model (exclude_embeds, exclude_lm_head), GQA patched to causal=0 + "
                    "attention_bias" if llm_export == "genai"
                    else "torch.onnx.export (legacy, via Olive OnnxConversion) with the 4-D bool mask")
    if llm_export == "genai" and recipes["llm"].standard_attention:
        llm["build"] += ", then rewritten in standard ONNX ops for onnxruntime-web (export/web_attention.py)"
    if llm_reason:
        llm["build_reason"] = llm_reason

    tokenizer_files = []
    for source in ckpt.tokenizer_files():
        shutil.copy2(source, staging / source.name)
        tokenizer_files.append(source.name)
    body = {
        "backbone": graphs,
        "scoring": scoring,
        "glue": glue,
        "tokenizer": {"files": tokenizer_files, "special_tokens": _special_tokens(staging)},
        "model": _model_facts(config),
        "precision": profile.recipe_precision,
        "graph_precision": {part: profile.precision[part] for part in ("llm", "embeddings", "heads")},
        "attention": "bidirectional",
        "llm_build": llm_export,
    }
    if quantization:
        body["quantization"] = quantization
    graph_files = [name for entry in (*graphs.values(), *scoring.values(), *glue.values())
                   for name in (entry["filename"], *entry["external_data"])]
    return body, graph_files + tokenizer_files


def _fidelity(request: BuildRequest, profile: Profile, staging: Path) -> dict:
    """The quantized build's decisions against upstream fp32 on its checkpoint (eval.py --mode fidelity),
    printed in one line; a build for a provider this machine lacks says how to measure it there."""
    import onnxruntime

    provider = profile.execution_provider
    if provider not in onnxruntime.get_available_providers():
        why = (f"not measured: the build runs on {provider}, which this machine lacks; run eval.py --mode fidelity "
               "--model_dir BUILD where it runs")
        request.log(f"fidelity: {why}")
        return {"measured": False, "why": why}
    from codes.export.fidelity import build_fidelity

    lines = []
    with library_output("the fidelity check"):
        report = build_fidelity(staging, request.checkpoint.path, log=lines.append)
    for line in lines:
        request.log(line)
    return {"measured": True, **report}


def _build_codec(request: BuildRequest, profile: Profile, staging: Path, work: Path) -> list[str]:
    """The codec folder, staged with its own manifest; returns its files relative to the build."""
    codec_dir = staging / specs.HIGGS_DIR
    section, files = _timed(request, "higgs", build_codec, request.checkpoint.higgs_path, codec_dir,
                            profile.recipe("codec"), work, log=request.log)
    write_manifest(codec_dir, {"kind": CODEC_KIND, "source": request.checkpoint.identity, "codec": section}, files)
    return [f"{specs.HIGGS_DIR}/{name}" for name in files] + [CODEC_MANIFEST]


def _whisper_part(request: BuildRequest, folder_name: str, staging: Path, work: Path, output: Path,
                  previous: dict | None) -> tuple[list[str], dict | None]:
    """A Whisper folder, the recogniser (asr/) or the aligner (aligner/): built, staged with its own manifest
    and probed while still staged (one that fails, or crashes, is never installed), or the previous build's
    kept; its files relative to the build, and the main manifest's section."""
    builds, model, precision, heads = ((request.builds_asr, request.asr_model, request.recogniser_precision, None)
                                       if folder_name == specs.ASR_DIR else
                                       (request.builds_aligner, request.aligner_model, request.aligner_precision,
                                        request.aligner_heads))
    if not builds:
        return [], asr_build.manifest_section(output / folder_name) if previous else None
    key = "asr" if folder_name == specs.ASR_DIR else "aligner"
    folder = _timed(request, key, asr_build.build_asr, model, staging, precision, work / key, folder_name, heads)
    _timed(request, f"{key}_probe", asr_build.probe_recogniser, folder, model,
           "cuda" if request.profile.execution_provider == "CUDAExecutionProvider" else "cpu")
    return asr_build.written_files(folder), asr_build.manifest_section(folder)


def _graph_entry(path: Path, folder: Path, precision: str, built_with: str) -> dict:
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
    from codes.export.tokenizer_build import OMNIVOICE_SPECIAL_TOKENS
    from codes.runtime.text.tokenizer import TextTokenizer

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


def _describe(request: BuildRequest, profile: Profile) -> dict:
    """What every manifest of this build says about where it came from and how to run it."""
    from codes.runtime.contract.settings import GenerationSettings

    describe = {
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
        "iterative_decoding": {
            "steps": GenerationSettings().num_steps,
            "audio_codebook_weights": list(specs.CODEBOOK_WEIGHTS),
            "per_step_pipeline": [spec.key for spec in (*specs.BACKBONE_SPECS, specs.SCORING)],
        },
    }
    if request.checkpoint is not None:  # a recogniser-only build reads no OmniVoice checkpoint
        ckpt_id = request.checkpoint.identity
        describe["model_id"] = ckpt_id.get("repo_id") or (ckpt_id["kind"] if ckpt_id.get("kind") != "local"
                                                           else request.checkpoint.path.name)
        describe["source"] = ckpt_id
    if request.builds_backbone:  # a codec or recogniser rebuild keeps the backbone's profile and timings
        describe.update({"profile": profile.name, "execution_provider": profile.execution_provider,
                         "build_seconds": dict(request.timings)})
    else:
        for key, part in (("higgs", "codec"), ("asr", "asr"), ("aligner", "aligner")):
            if key in request.timings:
                describe[f"{part}_build_seconds"] = {key: request.timings[key]}
    return describe
