"""Writing omnivoice_manifest.json: the build's facts plus the sha256 of exactly the files it wrote."""

from __future__ import annotations

from pathlib import Path

from codes.common.fileio import sha256_file, write_json_atomic
from codes.common.version import VERSION
from codes.runtime.contract.manifest import FORMAT, FORMAT_VERSION, MANIFEST_NAME


def hash_files(folder: Path, names=None) -> dict[str, str]:
    """sha256 of the named files (relative POSIX paths); without names, of every file under folder
    but the manifest."""
    folder = Path(folder)
    if names is None:
        names = [p.relative_to(folder).as_posix() for p in folder.rglob("*")
                 if p.is_file() and p.name != MANIFEST_NAME]
    return {name: sha256_file(folder / name) for name in sorted(names)}


def write_manifest(folder: Path, body: dict, files: list[str], hashes: dict | None = None) -> Path:
    """Hash the build's own files (or take `hashes` already made) and write the manifest, which
    must not reference a file the build did not write."""
    data = {"format": FORMAT, "format_version": FORMAT_VERSION, "toolkit_version": VERSION, **body}
    data["files"] = hashes if hashes is not None else hash_files(folder, files)
    missing = [name for name in _referenced_files(data) if name not in data["files"]]
    if missing:
        raise RuntimeError(f"manifest would reference files that are not in the build: {missing}")
    path = Path(folder) / MANIFEST_NAME
    write_json_atomic(path, data)
    return path


def _referenced_files(data: dict) -> list[str]:
    names = []
    for entry in (*data.get("backbone", {}).values(), *data.get("scoring", {}).values()):
        names += [entry["filename"], *entry.get("external_data", [])]
    names += data.get("tokenizer", {}).get("files", [])
    return names
