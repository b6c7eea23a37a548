"""omnivoice_manifest.json: the one contract between a build and every runtime.

Written last by optimize.py (atomically), read by inference.py, eval.py and
higgs_inference.py. Torch-free: the runtime imports this.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from codes import __version__
from codes.common.errors import UserError
from codes.common.fileio import sha256_file, write_json_atomic

MANIFEST_NAME = "omnivoice_manifest.json"
FORMAT = "omnivoice-onnx"
FORMAT_VERSION = 1
BACKBONE_KEYS = ("audio_embeddings_encoder", "llm_decoder", "audio_heads_decoder")


def hash_files(folder: Path) -> dict[str, str]:
    """sha256 of every file under folder (relative POSIX paths), the manifest itself excluded."""
    folder = Path(folder)
    return {
        path.relative_to(folder).as_posix(): sha256_file(path)
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name != MANIFEST_NAME
    }


def write_manifest(folder: Path, body: dict) -> Path:
    """Hash what is in the folder and write the manifest last, so it never points at missing files."""
    data = {"format": FORMAT, "format_version": FORMAT_VERSION, "toolkit_version": __version__, **body}
    data["files"] = hash_files(folder)
    missing = [name for name in _referenced_files(data) if name not in data["files"]]
    if missing:
        raise RuntimeError(f"manifest would reference files that are not in the build: {missing}")
    path = Path(folder) / MANIFEST_NAME
    write_json_atomic(path, data)
    return path


def _referenced_files(data: dict) -> list[str]:
    names = [entry["filename"] for entry in data.get("sub_models", {}).values()]
    for entry in data.get("sub_models", {}).values():
        names.extend(entry.get("external_data", []))
    higgs = data.get("higgs")
    if higgs:
        for entry in higgs["files"].values():
            names.append(f"{higgs['dir']}/{entry['filename']}")
    names.extend(data.get("tokenizer", {}).get("files", []))
    return names


@dataclass
class Manifest:
    folder: Path
    data: dict

    @property
    def sub_models(self) -> dict:
        return self.data.get("sub_models", {})

    @property
    def higgs(self) -> dict | None:
        return self.data.get("higgs")

    @property
    def attention(self) -> str:
        return self.data.get("attention", "unknown")

    def path_of(self, key: str) -> Path:
        try:
            return self.folder / self.sub_models[key]["filename"]
        except KeyError:
            raise UserError(f"{self.folder / MANIFEST_NAME} has no sub-model {key!r}; rebuild with optimize.py") from None

    def higgs_folder(self) -> Path:
        if not self.higgs:
            raise UserError(
                f"{self.folder} holds no Higgs codec; build one with optimize.py --include-higgs "
                "or point at a codec build with --higgs_dir"
            )
        return self.folder / self.higgs["dir"]

    def verify_hashes(self) -> None:
        for name, digest in self.data.get("files", {}).items():
            path = self.folder / name
            if not path.is_file():
                raise UserError(f"model folder {self.folder} is missing {name}, which its manifest lists; re-copy or rebuild it")
            if sha256_file(path) != digest:
                raise UserError(
                    f"{path} does not match its sha256 in {MANIFEST_NAME}; the file changed after the build, "
                    "re-copy the folder or rebuild it with optimize.py"
                )


def read_manifest(folder: str | Path, verify: bool = True) -> Manifest:
    """Load and check a build folder's manifest; every problem is a one-line UserError."""
    folder = Path(folder)
    path = folder / MANIFEST_NAME
    if not folder.is_dir():
        raise UserError(f"model folder {folder} does not exist; build one with optimize.py --output {folder}")
    if not path.is_file():
        raise UserError(f"{folder} has no {MANIFEST_NAME}; it is not an omnivoice-onnx build (make one with optimize.py)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not valid JSON ({exc}); rebuild the folder with optimize.py") from None
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
