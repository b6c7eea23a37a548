"""omnivoice_manifest.json: the one contract between a build and every runtime.

Written last by optimize.py (atomically), read by inference.py, eval.py and
higgs_inference.py. Torch-free: the runtime imports this.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from codes.common.errors import UserError
from codes.common.fileio import known_sha256, read_json_object, sha256_file
from codes.runtime.contract.specs import ASR_MANIFEST_NAME, CODEBOOK_SIZE, HOP_LENGTH, NUM_CODEBOOKS, SAMPLE_RATE

MANIFEST_NAME = "omnivoice_manifest.json"
FORMAT = "omnivoice-onnx"
# 2: a build's "files" lists only what it wrote, and the codec folder carries its own manifest.
FORMAT_VERSION = 2
CODEC_KIND = "codec"
RECIPE_SCHEMA = "recipe"
# What a published folder's manifest does not say about its codec: Higgs Audio V2's fixed facts.
CODEC_FACTS = {"sample_rate": SAMPLE_RATE, "hop_length": HOP_LENGTH, "num_codebooks": NUM_CODEBOOKS,
               "codebook_size": CODEBOOK_SIZE}

# Where optimize.py writes when no --output is given, so the runtime finds a build with no flags.
def default_build_dir(profile: str) -> Path:
    return Path("models") / f"omnivoice-{profile.replace('_', '-')}"


def default_codec_dir(precision: str) -> Path:
    return Path("models") / f"higgs-{precision}"


def default_asr_dir(precision: str) -> Path:
    return Path("models") / f"asr-{precision}"


@dataclass
class Manifest:
    """A build folder's manifest: ours, or the recipe's schema (a published folder: no hashes, and an
    attention kind that only a probe of its backbone can tell)."""

    folder: Path
    data: dict
    schema: str = FORMAT  # FORMAT or RECIPE_SCHEMA

    @property
    def sub_models(self) -> dict:
        """The backbone graphs by key (the recipe's `backbone` entries)."""
        return self.data.get("backbone", {})

    @property
    def higgs(self) -> dict | None:
        """The codec section (the recipe's `higgs_tokenizer`), if the folder holds a codec."""
        return self.data.get("higgs_tokenizer")

    @property
    def asr(self) -> dict | None:
        """The recogniser section (optimize.py --include-asr), if the folder holds one."""
        return self.data.get("asr")

    @property
    def is_codec(self) -> bool:
        """A codec folder (audio_tokenizer/), as opposed to a build that may hold one."""
        return self.data.get("kind") == CODEC_KIND

    @property
    def attention(self) -> str:
        return self.data.get("attention", "unknown")

    @property
    def graph_precision(self) -> dict:
        """Precision per backbone part (embeddings, llm, heads); a published folder's one word stands for all."""
        if "graph_precision" in self.data:
            return self.data["graph_precision"]
        word = self.data.get("precision")
        return dict.fromkeys(("embeddings", "llm", "heads"), word if isinstance(word, str) else "?")

    def path_of(self, key: str) -> Path:
        try:
            return self.folder / self.sub_models[key]["filename"]
        except (KeyError, TypeError):
            raise UserError(f"{self.folder / MANIFEST_NAME} names no {key} graph; rebuild with optimize.py") from None

    def codec(self) -> tuple[Path, dict]:
        """(codec folder, its section): this folder if it is a codec build, else the codec it holds."""
        if self.is_codec:
            return self.folder, self.data["codec"]
        if not self.higgs:
            raise UserError(
                f"{self.folder} holds no Higgs codec: build one with `python optimize.py --higgs-only` "
                "(or --include-higgs), or point at a codec build with --higgs_dir"
            )
        folder = self.folder / self.higgs["models_dir"]
        if self.schema == RECIPE_SCHEMA:
            return folder, self.higgs
        codec = read_manifest(folder)
        if not codec.is_codec:
            raise UserError(f"{codec.folder} is not a codec build; rebuild it with optimize.py --higgs-only")
        return codec.codec()

    @property
    def aligner(self) -> dict | None:
        """The aligner section (optimize.py --include-aligner), if the folder holds one."""
        return self.data.get("aligner")

    def recogniser(self) -> Path:
        """The recogniser's folder, its manifest checked against the sha256 this manifest recorded (the
        recogniser checks its own files' hashes when it loads)."""
        if not self.asr:
            raise UserError(f"{self.folder} holds no recogniser: build one with `python optimize.py --include-asr` "
                            "(or --asr-only), or point at a build holding one with --asr_dir")
        return self._whisper_folder(self.asr, "--include-asr")

    def aligner_folder(self) -> Path:
        """The aligner's folder, checked as the recogniser's is."""
        return self._whisper_folder(self.aligner, "--include-aligner")

    def _whisper_folder(self, section: dict, flag: str) -> Path:
        folder = self.folder / section["models_dir"]
        path = folder / section["manifest"]
        if not path.is_file():
            raise UserError(f"{self.folder} is missing {path.relative_to(self.folder)}, which its manifest lists; "
                            f"re-copy the folder or rebuild it with optimize.py {flag}")
        if sha256_file(path) != section["manifest_sha256"]:
            raise UserError(f"{path} does not match its sha256 in {MANIFEST_NAME}; rebuild with optimize.py {flag}")
        return folder

    def identity(self) -> str:
        """A short id of the graphs this build runs: from the files' sha256 where the manifest has them,
        else (a published folder) from the graph files' names, sizes and times."""
        files = self.data.get("files")
        if not files:
            files = {}
            for entry in self.sub_models.values():
                path = self.folder / entry.get("filename", "")
                stat = path.stat() if path.is_file() else None
                files[path.name] = [stat.st_size, stat.st_mtime_ns] if stat else None
        blob = json.dumps(files, sort_keys=True).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def verify_hashes(self) -> None:
        files = self.data.get("files", {})
        for name in files:
            if not (self.folder / name).is_file():
                raise UserError(f"model folder {self.folder} is missing {name}, which its manifest lists; re-copy or rebuild it")
        paths = [self.folder / name for name in files]
        for path, digest, found in zip(paths, files.values(), known_sha256(paths)):
            if found != digest:
                raise UserError(
                    f"{path} does not match its sha256 in {MANIFEST_NAME}; the file changed after the build, "
                    "re-copy the folder or rebuild it with optimize.py"
                )


def read_manifest(folder: str | Path, verify: bool = True) -> Manifest:
    """Load and check a build folder's manifest, ours or the recipe's; every problem is a one-line UserError."""
    folder = Path(folder)
    path = folder / MANIFEST_NAME
    if not folder.is_dir():
        raise UserError(f"model folder {folder} does not exist; build one with optimize.py --output {folder}")
    if not path.is_file():
        raise UserError(f"{folder} has no {MANIFEST_NAME}; it is not an omnivoice-onnx build (make one with optimize.py)")
    data = read_json_object(path, "rebuild the folder with optimize.py")
    if "format" not in data and isinstance(data.get("backbone"), dict):
        return Manifest(folder, _from_recipe_schema(path, data), RECIPE_SCHEMA)
    if data.get("format") != FORMAT:
        raise UserError(f"{path} is not an omnivoice-onnx manifest (format {data.get('format')!r}); rebuild with optimize.py")
    if data.get("format_version") != FORMAT_VERSION:
        raise UserError(
            f"{path} has format_version {data.get('format_version')}, this toolkit reads {FORMAT_VERSION}; rebuild with optimize.py"
        )
    manifest = Manifest(folder, data)
    if verify:
        manifest.verify_hashes()
    return manifest


def _from_recipe_schema(path: Path, data: dict) -> dict:
    """A published folder's manifest in the shapes our readers take: graph entries with a file name
    (a plain string is taken as one), and the codec section filled in with the codec's fixed facts."""

    def entries(section: dict, where: str) -> dict:
        graphs = {}
        for key, entry in section.items():
            filename = entry if isinstance(entry, str) else entry.get("filename") if isinstance(entry, dict) else None
            if not isinstance(filename, str):
                raise UserError(f"{path}: {where}.{key} names no filename; fix the manifest or rebuild with optimize.py")
            graphs[key] = {**(entry if isinstance(entry, dict) else {}), "filename": filename}
        return graphs

    normalized = {**data, "backbone": entries(data["backbone"], "backbone"), "attention": "unknown"}
    higgs = data.get("higgs_tokenizer")
    if isinstance(higgs, dict):
        if not isinstance(higgs.get("models_dir"), str) or not isinstance(higgs.get("sub_models"), dict):
            raise UserError(f"{path}: higgs_tokenizer needs models_dir and sub_models; fix the manifest or pass --higgs_dir")
        normalized["higgs_tokenizer"] = {**CODEC_FACTS, **higgs,
                                         "sub_models": entries(higgs["sub_models"], "higgs_tokenizer.sub_models")}
    return normalized


def build_key(model_dir: str | Path, higgs_dir: str | Path | None = None) -> str:
    """The build's identity for fingerprints (what a result made with it depends on): its manifest and its
    codec's, which hold every graph's sha256 (32 hex digits)."""
    manifest = read_manifest(model_dir, verify=False)
    holder = read_manifest(higgs_dir, verify=False) if higgs_dir else manifest
    codec_folder, _ = holder.codec()
    digest = hashlib.sha256()
    for folder in (Path(model_dir), Path(codec_folder)):
        digest.update((folder / MANIFEST_NAME).read_bytes())
    return digest.hexdigest()[:32]


def recogniser_folder(path: str | Path) -> Path:
    """--asr_dir: a recogniser folder (asr/, holding asr_manifest.json) or a build holding one."""
    path = Path(path)
    if (path / ASR_MANIFEST_NAME).is_file():
        return path
    if not (path / MANIFEST_NAME).is_file():
        raise UserError(f"{path} holds no recogniser (neither {ASR_MANIFEST_NAME} nor {MANIFEST_NAME}); point --asr_dir at "
                        "a build made with optimize.py --include-asr or --asr-only, or at its asr/ folder")
    return read_manifest(path).recogniser()


def find_builds(model_dir: str | Path | None, higgs_dir: str | Path | None) -> tuple[Path, Path | None]:
    """--model_dir and --higgs_dir as given, or where optimize.py writes by default: the model in
    models/omnivoice-cpu, the codec inside it or else in models/higgs-fp16 (None: none found yet)."""
    if model_dir is None:
        model_dir = default_build_dir("cpu")
        if not (model_dir / MANIFEST_NAME).is_file():
            raise UserError(f"no --model_dir given and {model_dir} holds no build: make it with "
                            "`python optimize.py --device cpu --include-higgs`, or pass --model_dir DIR")
    model_dir = Path(model_dir)
    if higgs_dir is None and (model_dir / MANIFEST_NAME).is_file():
        try:
            holds_codec = read_manifest(model_dir, verify=False).higgs is not None
        except UserError:  # not a manifest we read: the caller says so (or, in eval.py, probes the folder)
            holds_codec = True
        fallback = default_codec_dir("fp16")
        if not holds_codec and (fallback / MANIFEST_NAME).is_file():
            higgs_dir = fallback
    return model_dir, Path(higgs_dir) if higgs_dir is not None else None
