"""The web profile's build is also a static site, probed on onnxruntime-web's WASM backend before it is installed.

Beside the graphs, the tokenizer and the manifest, a web build holds (docs/build.md, "The web profile"):

  omnivoice.mjs   the site's entry: the runtime on the site's own onnxruntime-web
  omnivoice/      the JavaScript runtime's modules (web/src), its data as real JSON files, and the browser builds of
                  the packages it imports (vendor/), which its copies import by relative paths
  ort/            the onnxruntime-web files the runtime needs: its bundle with the WASM and WebGPU (JSEP) backends,
                  and the JSEP build's .mjs (also the WASM threads' worker) and .wasm, from web/node_modules
  index.html ...  everything in web/site/ (the page and its assets)

The manifest lists every one of them with its sha256, as it lists the graphs, so a site is checked like any build.
Then `node web/tools/probe_wasm.mjs` opens every graph of the staged build with onnxruntime-web's WASM backend and
runs it once; a graph that does not load or run stops the build in one line, and nothing is installed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import onnx

from codes.common.errors import UserError

ROOT = Path(__file__).resolve().parents[2]
WEB = ROOT / "web"  # the JavaScript package (tests point it elsewhere)

ENTRY = "omnivoice.mjs"
RUNTIME_DIR = "omnivoice"
VENDOR_DIR = f"{RUNTIME_DIR}/vendor"
ORT_DIR = "ort"
ORT_DIST = Path("node_modules/onnxruntime-web/dist")
# ort.min.mjs registers the WASM and WebGPU backends, both on the JSEP build, which it loads from wasmPaths; that
# .mjs is also the worker WASM threads start. (The ort.webgpu bundles use the newer native WebGPU build instead.)
ORT_BUNDLE = "ort.min.mjs"
ORT_FILES = (ORT_BUNDLE, "ort-wasm-simd-threaded.jsep.mjs", "ort-wasm-simd-threaded.jsep.wasm")
# The runtime's other packages as single-file ES modules a browser loads: a page has no node_modules to resolve
# their bare names, so the site's copies of the runtime import these by relative path.
VENDOR = {
    "@huggingface/tokenizers": ("node_modules/@huggingface/tokenizers/dist/tokenizers.min.mjs", "tokenizers.mjs"),
    "fflate": ("node_modules/fflate/esm/browser.js", "fflate.mjs"),
}
RUNTIME_SUFFIXES = (".mjs", ".js", ".json")  # web/src's modules and data (its data link also holds Python files)
PROBE = Path("tools/probe_wasm.mjs")
PROBE_SECONDS = 1800  # the full-size build's ten graphs take about 10 s on 2 cores
SETUP = "run `make setup` (it installs web/'s packages with npm ci)"

# Past these an external-data file cannot be fetched into one ArrayBuffer everywhere, and WebGPU's default
# device cannot bind one weight as a single storage buffer.
MAX_FILE_BYTES = 2_000_000_000
WEBGPU_DEFAULT_LIMITS = {"maxStorageBufferBindingSize": 128 << 20, "maxBufferSize": 256 << 20}
# What a page fetches only to clone a voice: the codec's encoders.
ENCODER_GRAPHS = ("acoustic_encoder", "semantic_encoder", "quantizer_encoder")


def check_ready() -> None:
    """Refuse a web build, in one line and before anything is written, on a machine that cannot assemble or
    probe its site."""
    missing = [name for name in (*(ORT_DIST / f for f in ORT_FILES), *(Path(p) for p, _ in VENDOR.values()))
               if not (WEB / name).is_file()]
    if missing:
        raise UserError(f"--device web copies onnxruntime-web from {WEB / 'node_modules'}, which lacks {missing[0]}: "
                        f"{SETUP}")
    if not (WEB / "src").is_dir():
        raise UserError(f"--device web copies the JavaScript runtime from {WEB / 'src'}, which is missing; "
                        "restore the checkout's web/ folder")
    if shutil.which("node") is None:
        raise UserError("--device web probes its graphs with Node (web/tools/probe_wasm.mjs), and this machine has "
                        "no `node` on its PATH: install Node 20 or newer, then run `make setup`")


def planned_files() -> list[str]:
    """The site's files, relative to the build folder (before building: for refusing early)."""
    return [target for target, _ in _site_sources()]


def write_site(folder: Path) -> list[str]:
    """Write the site into a (staged) build folder; returns its files, relative to the folder."""
    folder = Path(folder)
    written = []
    src = WEB / "src"
    for target, source in _site_sources():
        path = folder / target
        path.parent.mkdir(parents=True, exist_ok=True)
        if source is None:
            path.write_text(_entry_module(), encoding="utf-8")
        elif source.is_relative_to(src) and source.suffix in (".mjs", ".js"):
            path.write_text(_relative_imports(source.read_text(encoding="utf-8"), target), encoding="utf-8")
        else:
            shutil.copyfile(source, path)
        path.chmod(0o644)
        written.append(target)
    return written


def _site_sources() -> list[tuple[str, Path | None]]:
    """(file in the site, where it comes from) for every file the site holds; None: generated."""
    files: list[tuple[str, Path | None]] = [(ENTRY, None)]
    src = WEB / "src"
    for path in sorted(_walk(src)):
        if path.suffix in RUNTIME_SUFFIXES:
            files.append((f"{RUNTIME_DIR}/{path.relative_to(src).as_posix()}", path))
    files += [(f"{VENDOR_DIR}/{name}", WEB / source) for source, name in VENDOR.values()]
    files += [(f"{ORT_DIR}/{name}", WEB / ORT_DIST / name) for name in ORT_FILES]
    site = WEB / "site"
    if site.is_dir():
        files += [(path.relative_to(site).as_posix(), path) for path in sorted(_walk(site))]
    seen = set()
    for target, _ in files:
        if target in seen:
            raise UserError(f"web/site/{target} has the name of a file the site's build writes; rename it")
        seen.add(target)
    return files


def _walk(folder: Path):
    """Every file under folder, following links (web/src/data is one), hidden files and Python's caches left out."""
    for root, dirs, names in os.walk(folder, followlinks=True):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d != "__pycache__")
        for name in names:
            if not name.startswith("."):
                yield Path(root) / name


def _entry_module() -> str:
    return (
        "// The site's entry (written by optimize.py --device web): the OmniVoice runtime on this site's own\n"
        "// onnxruntime-web, whose .wasm and worker files it loads from ./ort/.\n"
        f'import * as ort from "./{ORT_DIR}/{ORT_BUNDLE}";\n'
        f'import {{ useOnnxRuntime }} from "./{RUNTIME_DIR}/index.mjs";\n'
        f'useOnnxRuntime(ort, {{ wasmPaths: new URL("./{ORT_DIR}/", import.meta.url).href }});\n'
        f'export * from "./{RUNTIME_DIR}/index.mjs";\n'
    )


def _relative_imports(text: str, target: str) -> str:
    """A runtime module with its imports of VENDOR packages pointed at the site's copies."""
    depth = target.count("/") - 1  # folders below omnivoice/
    for package, (_, name) in VENDOR.items():
        relative = ("../" * depth or "./") + f"vendor/{name}"
        pattern = re.compile(r"""(\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)(["'])""" + re.escape(package) + r"\2")
        text = pattern.sub(lambda m, r=relative: f"{m.group(1)}{m.group(2)}{r}{m.group(2)}", text)
    return text


def onnxruntime_web_version() -> str | None:
    try:
        return json.loads((WEB / ORT_DIST.parent / "package.json").read_text())["version"]
    except (OSError, ValueError, KeyError):
        return None


def web_facts(folder: Path, graph_files: list[str], site_files: list[str], all_files: list[str]) -> dict:
    """The manifest's `web` section: what the site holds, the largest weight a WebGPU device must bind and the
    limits it needs, and the download sizes. Refuses a build with an external-data file of 2 GB or more."""
    folder = Path(folder)
    sizes = {name: (folder / name).stat().st_size for name in all_files}
    largest_file = max(sizes, key=sizes.get)
    if sizes[largest_file] >= MAX_FILE_BYTES:
        raise UserError(f"{largest_file} is {sizes[largest_file] / 1e9:.2f} GB; a web build keeps every file under "
                        f"{MAX_FILE_BYTES / 1e9:.0f} GB, which a browser fetches into one buffer")
    largest = max(((_largest_weight(folder / name), name) for name in graph_files), key=lambda item: item[0][0])
    (weight_bytes, weight), graph = largest
    required = ({key: max(value, _round_up(weight_bytes)) for key, value in WEBGPU_DEFAULT_LIMITS.items()}
                if weight_bytes > WEBGPU_DEFAULT_LIMITS["maxStorageBufferBindingSize"] else {})
    encoders = {name for name in all_files if any(Path(name).name.startswith(key + ".onnx") for key in ENCODER_GRAPHS)}
    return {
        "backends": ["wasm", "webgpu", "node"],
        "site": {
            "entry": ENTRY,
            "page": "index.html" if "index.html" in site_files else None,
            "runtime": f"{RUNTIME_DIR}/index.mjs",
            "onnxruntime_web": {"version": onnxruntime_web_version(), "bundle": f"{ORT_DIR}/{ORT_BUNDLE}",
                                "wasm_paths": f"{ORT_DIR}/"},
            "files": len(site_files),
        },
        "webgpu": {
            "largest_weight": {"graph": graph, "tensor": weight, "bytes": weight_bytes},
            "default_limits": WEBGPU_DEFAULT_LIMITS,
            # Empty: every weight fits the default device. onnxruntime-web's own device asks for the adapter's
            # maxima of both anyway; a runtime that makes its own device must ask for these.
            "required_limits": required,
        },
        "largest_file": {"file": largest_file, "bytes": sizes[largest_file]},
        "download_bytes": {"all": sum(sizes.values()),
                           "speech": sum(size for name, size in sizes.items() if name not in encoders)},
    }


def _round_up(value: int, multiple: int = 1 << 20) -> int:
    return -(-value // multiple) * multiple


def _largest_weight(path: Path) -> tuple[int, str]:
    """(bytes, name) of the graph's largest weight as it lies in memory once loaded: an initializer read only by a
    Cast (fp16 storage) counts at the Cast's type, into which ONNX Runtime folds it."""
    model = onnx.load(str(path), load_external_data=False)
    readers: dict[str, list] = {}
    for node in model.graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    best = (0, "")
    for tensor in model.graph.initializer:
        dtype = tensor.data_type
        nodes = readers.get(tensor.name, [])
        if nodes and all(n.op_type == "Cast" for n in nodes):
            dtype = next(a.i for a in nodes[0].attribute if a.name == "to")
        elements = 1
        for d in tensor.dims:
            elements *= d
        size = elements * onnx.helper.tensor_dtype_to_np_dtype(dtype).itemsize
        best = max(best, (size, tensor.name))
    return best


def probe_wasm(folder: Path, log=print) -> dict:
    """Every graph of the staged build opened and run once on onnxruntime-web's WASM backend, under Node (one JSON
    line from web/tools/probe_wasm.mjs); a failure is one UserError line. Returns the manifest's `probe` entry."""
    command = ["node", str(WEB / PROBE), str(Path(folder).resolve())]
    try:
        result = subprocess.run(command, capture_output=True, text=True, cwd=WEB, timeout=PROBE_SECONDS)
    except subprocess.TimeoutExpired:
        raise UserError(f"the WASM probe (node {PROBE.as_posix()}) ran past {PROBE_SECONDS} s; nothing was "
                        "installed") from None
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    try:
        report = json.loads(lines[-1])
    except (IndexError, ValueError):
        errors = [line for line in result.stderr.splitlines() if line.strip()]
        why = errors[-1] if errors else f"exit {result.returncode}"
        raise UserError(f"the WASM probe (node {PROBE.as_posix()}) failed before reporting: {why}; nothing was "
                        "installed") from None
    if result.returncode != 0 or not report.get("ok"):
        raise UserError(f"onnxruntime-web's WASM backend cannot run this build's graphs: {report.get('error')}; "
                        "nothing was installed")
    log(f"  probed on onnxruntime-web {report.get('version')} (WASM, Node): {len(report['graphs'])} graphs loaded "
        f"and ran in {report.get('seconds', 0):.1f} s")
    return {"backend": "wasm", "host": "node", "onnxruntime_web": report.get("version"),
            "threads": report.get("threads"), "graphs": [g["graph"] for g in report["graphs"]],
            "seconds": report.get("seconds")}

