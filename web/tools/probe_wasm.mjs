#!/usr/bin/env node
/**
 * The WASM probe of a build (codes/export/web_site.py runs it on every web build, as codes/export/asr_build.py
 * probes a recogniser): every graph the manifest names, the codec's too, opened with onnxruntime-web and run once
 * on small inputs shaped as the manifest says. It prints one JSON line and exits 1 if a graph does not load, does
 * not run, or gives an output of another shape than its manifest entry.
 *
 *   node web/tools/probe_wasm.mjs BUILD_DIR [--threads N]
 *
 * `probeBuild` takes the onnxruntime module, the backend and a file reader, so a page can probe a site's build on
 * WebGPU with the same inputs.
 */

/** Sizes for the manifests' symbolic dimensions: small, and consistent where two graphs share a name. */
export const DIMS = Object.freeze({
  batch: 2, batch_size: 2, sequence: 6, sequence_length: 6, items: 1, rows: 2, target: 3, frames: 4,
});

/**
 * @typedef {{name: string, dtype: string, shape: (string | number)[]}} TensorEntry
 * @typedef {{key: string, file: string, externalData: string[], inputs: TensorEntry[], outputs: TensorEntry[]}} Graph
 * @typedef {(name: string) => Promise<Uint8Array>} ReadFile  a build file's bytes, by its path in the build
 */

/**
 * Every graph a build's manifest names: the step's (backbone, scoring, glue) and its codec's.
 * @param {any} manifest the build's omnivoice_manifest.json
 * @param {any} [codecManifest] its codec folder's manifest, where the build holds one
 * @returns {Graph[]}
 */
export function graphsOf(manifest, codecManifest) {
  /** @type {Graph[]} */
  const graphs = [];
  for (const section of ["backbone", "scoring", "glue"]) {
    for (const [key, entry] of Object.entries(manifest[section] ?? {})) {
      graphs.push({ key, file: entry.filename, externalData: entry.external_data ?? [], inputs: entry.inputs,
                    outputs: entry.outputs });
    }
  }
  if (codecManifest) {
    const folder = manifest.higgs_tokenizer.models_dir;
    const files = codecManifest.files ?? {};
    for (const [key, entry] of Object.entries(codecManifest.codec.sub_models)) {
      const data = entry.filename + ".data";
      graphs.push({ key, file: `${folder}/${entry.filename}`, externalData: data in files ? [`${folder}/${data}`] : [],
                    inputs: entry.inputs, outputs: entry.outputs });
    }
  }
  return graphs;
}

/**
 * The dimension sizes for a build: DIMS, the codec's feature widths, and whole hops of audio.
 * @param {any} [codecManifest]
 * @returns {Record<string, number>}
 */
export function dimsFor(codecManifest) {
  const codec = codecManifest?.codec ?? {};
  return { ...DIMS, samples: DIMS.frames * (codec.hop_length ?? 960), acoustic_dim: codec.acoustic_dim ?? 1,
           semantic_dim: codec.semantic_dim ?? 1 };
}

/**
 * One float in [0.25, 0.75) per call, the same run to run: a uniform in (0, 1) wherever a graph takes one.
 * @param {number} seed
 */
function uniforms(seed) {
  let state = seed >>> 0;
  return () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return 0.25 + 0.5 * (state / 2 ** 32);
  };
}

/** @param {number} value @returns {number} the float16 bits of value (round to nearest even; no subnormals) */
function toHalfBits(value) {
  const f32 = new Float32Array([value]);
  const bits = new Uint32Array(f32.buffer)[0];
  const sign = (bits >>> 16) & 0x8000;
  const exponent = ((bits >>> 23) & 0xff) - 127 + 15;
  if (exponent <= 0) return sign;
  if (exponent >= 31) return sign | 0x7c00;
  let mantissa = bits & 0x7fffff;
  let half = sign | (exponent << 10) | (mantissa >>> 13);
  mantissa &= 0x1fff;
  if (mantissa > 0x1000 || (mantissa === 0x1000 && (half & 1))) half += 1;
  return half;
}

/**
 * A tensor's data as onnxruntime-web takes it, filled for a probe.
 * @param {string} dtype numpy's name, as the manifest records it
 * @param {number} size
 * @param {() => number} next
 */
function probeData(dtype, size, next) {
  switch (dtype) {
    case "float32": return Float32Array.from({ length: size }, next);
    case "float16": return Uint16Array.from({ length: size }, () => toHalfBits(next()));
    case "int64": return new BigInt64Array(size); // token ids, codes and indices: 0 is valid for each
    case "int32": return new Int32Array(size);
    case "bool": return new Uint8Array(size).fill(1);
    default: throw new Error(`the probe has no inputs of dtype ${dtype}`);
  }
}

const ORT_TYPES = /** @type {Record<string, string>} */ ({
  float32: "float32", float16: "float16", int64: "int64", int32: "int32", bool: "bool",
});

/**
 * A shape with every symbolic dimension sized.
 * @param {(string | number)[]} shape @param {Record<string, number>} dims @param {Set<string>} guessed
 */
function sized(shape, dims, guessed) {
  return shape.map((d) => {
    if (typeof d === "number" && d > 0) return d;
    const name = String(d);
    if (!(name in dims)) guessed.add(name);
    return dims[name] ?? 2;
  });
}

/** @param {string} text */
function firstLine(text) {
  return String(text).split("\n").find((line) => line.trim()) ?? String(text);
}

/**
 * Open and run every graph of a build once.
 * @param {any} ort the onnxruntime-web (or -node) module
 * @param {ReadFile} readFile
 * @param {{backend?: string, sessionOptions?: any, log?: (line: string) => void}} [options]
 * @returns {Promise<{ok: boolean, backend: string, graphs: any[], error?: string, dims?: Record<string, number>,
 *   guessed_dims?: string[]}>}
 */
export async function probeBuild(ort, readFile, options = {}) {
  const backend = options.backend ?? "wasm";
  const decode = (/** @type {Uint8Array} */ bytes) => JSON.parse(new TextDecoder().decode(bytes));
  const manifest = decode(await readFile("omnivoice_manifest.json"));
  const codecManifest = manifest.higgs_tokenizer
    ? decode(await readFile(`${manifest.higgs_tokenizer.models_dir}/omnivoice_manifest.json`)) : undefined;
  const dims = dimsFor(codecManifest);
  const guessed = new Set();
  const graphs = [];
  for (const [index, graph] of graphsOf(manifest, codecManifest).entries()) {
    const record = { graph: graph.key, file: graph.file };
    let session;
    try {
      const started = Date.now();
      const externalData = [];
      for (const name of graph.externalData) {
        externalData.push({ path: name.split("/").pop(), data: await readFile(name) });
      }
      session = await ort.InferenceSession.create(await readFile(graph.file), {
        executionProviders: [backend], externalData, logSeverityLevel: 3, ...options.sessionOptions });
      const loaded = Date.now();
      const next = uniforms(index + 1);
      /** @type {Record<string, any>} */
      const feeds = {};
      for (const input of graph.inputs) {
        const shape = sized(input.shape, dims, guessed);
        const size = shape.reduce((a, b) => a * b, 1);
        feeds[input.name] = new ort.Tensor(ORT_TYPES[input.dtype], probeData(input.dtype, size, next), shape);
      }
      const results = await session.run(feeds);
      /** @type {Record<string, number[]>} */
      const outputs = {};
      /** @type {Record<string, number>} */
      const sums = {};  // compares one backend's numbers with another's on the same inputs
      let finite = true;
      for (const output of graph.outputs) {
        const tensor = results[output.name];
        if (!tensor) throw new Error(`no output ${output.name}`);
        const expected = sized(output.shape, dims, guessed);
        if (expected.length !== tensor.dims.length || expected.some((d, i) => d !== tensor.dims[i])) {
          throw new Error(`output ${output.name} has shape [${tensor.dims}], the manifest's shape gives [${expected}]`);
        }
        outputs[output.name] = [...tensor.dims];
        if (tensor.type === "float32") {
          finite &&= tensor.data.every(Number.isFinite);
          sums[output.name] = tensor.data.reduce((a, b) => a + Math.abs(b), 0);
        } else if (tensor.type === "int64") {
          sums[output.name] = tensor.data.reduce((a, b) => a + Math.abs(Number(b)), 0);
        }
      }
      graphs.push({ ...record, load_ms: loaded - started, run_ms: Date.now() - loaded, outputs, abs_sums: sums, finite });
      options.log?.(`${graph.file}: ran`);
    } catch (error) {
      const message = firstLine(/** @type {any} */ (error)?.message ?? error);
      return { ok: false, backend, graphs, error: `${graph.file}: ${message}`, dims, guessed_dims: [...guessed] };
    } finally {
      await session?.release();
    }
  }
  return { ok: true, backend, graphs, dims, guessed_dims: [...guessed] };
}

/** The command line: probe a build folder on onnxruntime-web's WASM backend under Node. */
async function main() {
  const args = process.argv.slice(2);
  const threadsAt = args.indexOf("--threads");
  const threads = threadsAt >= 0 ? Number(args.splice(threadsAt, 2)[1]) : 1;
  if (args.length !== 1 || !Number.isInteger(threads) || threads < 1) {
    console.log(JSON.stringify({ ok: false, error: "usage: node probe_wasm.mjs BUILD_DIR [--threads N]" }));
    return 2;
  }
  const fs = await import("node:fs/promises");
  const path = await import("node:path");
  const folder = args[0];
  const ort = await import("onnxruntime-web");
  ort.env.wasm.numThreads = threads;
  ort.env.logLevel = "error";
  const started = Date.now();
  /** @type {ReadFile} */
  const readFile = async (name) => new Uint8Array(await fs.readFile(path.join(folder, name)));
  let result;
  try {
    result = await probeBuild(ort, readFile, { backend: "wasm" });
  } catch (error) {  // an unreadable build: no manifest, a missing file
    result = { ok: false, backend: "wasm", graphs: [], error: firstLine(/** @type {any} */ (error)?.message ?? error) };
  }
  console.log(JSON.stringify({ probe: "onnxruntime-web", version: ort.env.versions?.web, threads, ...result,
                               seconds: (Date.now() - started) / 1000 }));
  return result.ok ? 0 : 1;
}

if (typeof process !== "undefined" && process.argv[1]
    && import.meta.url === (await import("node:url")).pathToFileURL(process.argv[1]).href) {
  process.exitCode = await main();
}
