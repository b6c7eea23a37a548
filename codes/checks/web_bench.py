"""The JavaScript runtime's speed and size on this host, beside the Python runtime's (bench/web_bench.py).

For each build: the Python runtime (OmniVoiceOnnx), Node on onnxruntime-node, Node on onnxruntime-web's WASM, and
Chromium on WASM in a cross-origin isolated page (threads); for builds marked small, Chromium on WebGPU through
SwiftShader as well (Vulkan on the CPU: a check that WebGPU runs, not a GPU's speed). Every runner loads the build,
speaks a two-step warm-up, then the utterance at temperature 0, timing each step (web/bench/timed_run.mjs is the one
timing for Node and the page); its codes are held to the Python runtime's on the same build, cell by cell. Memory: the process's peak RSS (Python, Node); in Chromium, the WebAssembly memory's size at the end
(it only grows, so that is its peak). The download: what a page fetches, from the web build's manifest.
"""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
NODE_RUN = ROOT / "web" / "bench" / "speak_timed.mjs"
BENCH_DIR = ROOT / "web" / "bench"
CHROMIUM = "/usr/bin/chromium"
WEBGPU_ARGS = ["--enable-unsafe-webgpu", "--use-webgpu-adapter=swiftshader", "--enable-features=Vulkan"]
ISOLATION = {"Cross-Origin-Opener-Policy": "same-origin", "Cross-Origin-Embedder-Policy": "require-corp",
             "Cross-Origin-Resource-Policy": "same-origin"}
BLANK_PAGE = b"<!doctype html><meta charset=utf-8><title>bench</title>"
# Memories a page's WebAssembly creates (threaded builds make theirs in JS, others export it), kept to read at the end.
WATCH_MEMORY = """
(() => {
  const memories = (globalThis.__benchMemories = []);
  const Memory = WebAssembly.Memory;
  WebAssembly.Memory = function (descriptor) { const m = new Memory(descriptor); memories.push(m); return m; };
  WebAssembly.Memory.prototype = Memory.prototype;
  for (const name of ["instantiate", "instantiateStreaming"]) {
    const original = WebAssembly[name];
    WebAssembly[name] = async (...args) => {
      const made = await original(...args);
      const exports = (made.instance ?? made).exports ?? {};
      for (const value of Object.values(exports)) if (value instanceof Memory) memories.push(value);
      return made;
    };
  }
})();
"""
IN_PAGE = """async (o) => {
  const runtime = await import("/omnivoice.mjs");
  const { timedRun } = await import("/bench/timed_run.mjs");
  const run = await timedRun(runtime.OmniVoice, location.origin + "/", o);
  const bytes = Math.max(0, ...globalThis.__benchMemories.map((m) => m.buffer.byteLength));
  return { ...run, wasm_memory_mb: bytes / 2 ** 20, isolated: globalThis.crossOriginIsolated };
}"""


def node_run(build: Path, backend: str, workload: dict) -> dict:
    command = ["node", str(NODE_RUN), str(build), "--backend", backend, "--threads", str(workload["threads"]),
               "--text", workload["text"], "--duration", str(workload["duration"]),
               "--num_steps", str(workload["num_steps"]), "--seed", "0"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if result.returncode != 0:
        return {"error": (result.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(result.stdout.strip().splitlines()[-1])


PYTHON_RUN = """
import json, resource, sys, time
from codes.runtime.synthesis import OmniVoiceOnnx
build, threads, text, duration, steps = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
start = time.perf_counter()
tts = OmniVoiceOnnx(build, threads=threads)
tts.codec.load_decoder()
load = time.perf_counter() - start
start = time.perf_counter()
tts.generate("Warm up.", language="en", seed=0, num_steps=2)
warm = time.perf_counter() - start
marks = [time.perf_counter()]
wav, codes = tts.generate(text, language="en", duration=duration, num_steps=steps, seed=0, return_codes=True,
                          position_temperature=0.0, class_temperature=0.0,
                          on_step=lambda step, total: marks.append(time.perf_counter()))
seconds = time.perf_counter() - marks[0]
steps_s = sorted(b - a for a, b in zip(marks, marks[1:]))
print(json.dumps({"backend": "python", "load_s": load, "warmup_s": warm, "generate_s": seconds,
                  "audio_s": len(wav) / 24000, "rtf": seconds / (len(wav) / 24000), "steps": len(steps_s),
                  "step_median_s": steps_s[len(steps_s) // 2], "codes": codes.ravel().tolist(),
                  "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def python_run(build: Path, workload: dict) -> dict:
    command = [sys.executable, "-c", PYTHON_RUN, str(build), str(workload["threads"]), workload["text"],
               str(workload["duration"]), str(workload["num_steps"])]
    result = subprocess.run(command, capture_output=True, text=True, timeout=3600, cwd=ROOT)
    if result.returncode != 0:
        return {"error": (result.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(result.stdout.strip().splitlines()[-1])


class _SiteHandler(http.server.SimpleHTTPRequestHandler):
    """The site at /, web/bench at /bench/, every answer cross-origin isolated (what threads need)."""

    def __init__(self, *args, site: Path, **kwargs):
        self.site = site
        super().__init__(*args, directory=str(site), **kwargs)

    def translate_path(self, path):
        if path.startswith("/bench/"):
            return str(BENCH_DIR / Path(path.split("?")[0][len("/bench/"):]).name)
        return super().translate_path(path)

    def do_GET(self):
        if self.path.startswith("/bench/page.html"):
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(BLANK_PAGE)))
            self.end_headers()
            self.wfile.write(BLANK_PAGE)
            return
        super().do_GET()

    def end_headers(self):
        for name, value in ISOLATION.items():
            self.send_header(name, value)
        super().end_headers()

    def guess_type(self, path):
        return "text/javascript" if str(path).endswith(".mjs") else super().guess_type(path)

    def log_message(self, *args):
        pass


def browser_run(site: Path, backend: str, workload: dict) -> dict:
    from playwright.sync_api import sync_playwright

    handler = functools.partial(_SiteHandler, site=site)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM,
                                                 args=WEBGPU_ARGS if backend == "webgpu" else [])
            page = browser.new_page()
            page.add_init_script(WATCH_MEMORY)
            page.goto(f"http://127.0.0.1:{server.server_port}/bench/page.html")
            options = {"backend": backend, "threads": workload["threads"], "text": workload["text"],
                       "duration": workload["duration"], "numSteps": workload["num_steps"], "seed": 0}
            try:
                return page.evaluate(IN_PAGE, options)
            except Exception as exc:  # the page's error, as one line for the table
                return {"error": str(exc).strip().splitlines()[0]}
            finally:
                browser.close()
    finally:
        server.shutdown()


def site_sizes(build: Path) -> dict:
    """Bytes a visitor downloads: every file of the site, and what speaking needs (the manifest's own count)."""
    manifest = json.loads((build / "omnivoice_manifest.json").read_text(encoding="utf-8"))
    total = sum(p.stat().st_size for p in build.rglob("*") if p.is_file())
    return {"site_bytes": total, "manifest_download": manifest.get("web", {}).get("download_bytes")}


def measure(builds: list[tuple[str, Path, bool]], workloads: dict, runners: list[str]) -> dict:
    """builds: (label, folder, small); workloads: label -> workload; runners: which of RUNNERS run."""
    rows = []
    for label, build, small in builds:
        workload = workloads[label]
        for runner in runners:
            if runner in SMALL_ONLY and not small:
                continue
            print(f"{label}: {runner} ...", file=sys.stderr, flush=True)
            if runner == "python":
                result = python_run(build, workload)
            elif runner.startswith("node-"):
                result = node_run(build, runner.removeprefix("node-"), workload)
            else:
                result = browser_run(build, runner.removeprefix("chromium-"), workload)
            rows.append({"build": label, "runner": runner, **result})
            print(json.dumps({k: v for k, v in rows[-1].items() if k != "codes"})[:400], file=sys.stderr, flush=True)
    python_codes = {row["build"]: row["codes"] for row in rows if row["runner"] == "python" and "codes" in row}
    for row in rows:  # each runner's codes against the Python runtime's on the same build
        codes, reference = row.pop("codes", None), python_codes.get(row["build"])
        if codes is not None and reference is not None and len(codes) == len(reference):
            row["agreement"] = sum(a == b for a, b in zip(codes, reference)) / len(reference)
    return {"rows": rows, "workloads": workloads,
            "sizes": {label: site_sizes(build) for label, build, _ in builds}}


RUNNERS = ["python", "node-node", "node-wasm", "chromium-wasm", "chromium-webgpu"]
# Run on small builds only: SwiftShader's WebGPU takes minutes a step at full size, and Node's WASM is the same
# onnxruntime-web as Chromium's (its full-size step was measured once, in bench/web_results.md's notes).
SMALL_ONLY = ("node-wasm", "chromium-webgpu")
RUNNER_NAMES = {"python": "Python runtime (onnxruntime, CPU EP)", "node-node": "Node, onnxruntime-node (CPU EP)",
                "node-wasm": "Node, onnxruntime-web WASM", "chromium-wasm": "Chromium, onnxruntime-web WASM",
                "chromium-webgpu": "Chromium, WebGPU on SwiftShader (CPU; not a GPU's speed)"}


def _percent(value) -> str:
    return "–" if value is None else f"{100 * value:.1f}%"


def _cell(value, digits=2) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def page(data: dict, machine_line: str, command: str) -> list[str]:
    lines = ["# The JavaScript runtime: speed and size", "", f"Measured on {machine_line}.", "", f"`{command}`", ""]
    for label, workload in data["workloads"].items():
        lines.append(f"- {label}: \"{workload['text']}\", {workload['duration']:g} s, {workload['num_steps']} steps, "
                     f"{workload['threads']} threads, seed 0")
    lines += ["", "| build | runner | load s | warm-up s | step s (median) | synthesis s | RTF | peak memory MB | "
              "codes as Python's |", "|---|---|---|---|---|---|---|---|---|"]
    for row in data["rows"]:
        name = RUNNER_NAMES[row["runner"]]
        if "error" in row:
            lines.append(f"| {row['build']} | {name} | failed: {row['error'][:160]} | | | | | | |")
            continue
        memory = row.get("wasm_memory_mb") if row["runner"].startswith("chromium") else row.get("max_rss_mb")
        memory_note = " (WASM memory)" if row["runner"].startswith("chromium") else " (RSS)"
        lines.append(f"| {row['build']} | {name} | {_cell(row['load_s'])} | {_cell(row['warmup_s'])} | "
                     f"{_cell(row['step_median_s'], 3)} | {_cell(row['generate_s'])} | {_cell(row['rtf'])} | "
                     f"{_cell(memory, 0)}{memory_note} | {_percent(row.get('agreement'))} |")
    lines += ["", "Codes as Python's: the share of cells equal to the Python runtime's on the same build, at temperature 0. "
              "WebGPU on SwiftShader runs WebGPU's shaders on this CPU through Vulkan: it shows that the graphs run "
              "there and decide alike, not what a GPU does. A real GPU could not be measured on this host. Node's WASM "
              "is the same onnxruntime-web as Chromium's, so it runs on the small build only. The web profile computes "
              "its int4 weights in fp32 so that every backend decides alike (docs/build.md, \"The web profile\").",
              "", "| build | site on disk MB | what a page downloads to speak MB |", "|---|---|---|"]
    for label, sizes in data["sizes"].items():
        download = sizes["manifest_download"]
        speech = download.get("speech") if isinstance(download, dict) else download
        lines.append(f"| {label} | {sizes['site_bytes'] / 2**20:.1f} | "
                     f"{'–' if speech is None else f'{speech / 2**20:.1f}'} |")
    return lines
