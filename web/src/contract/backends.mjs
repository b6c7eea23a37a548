/**
 * Which ONNX Runtime runs the graphs, and sessions on it (the JS side of codes/runtime/contract/sessions.py).
 * Under Node: onnxruntime-node ("node", the native CPU provider) or onnxruntime-web's WASM ("wasm"). In a page:
 * onnxruntime-web, WASM or WebGPU, as the site's omnivoice.mjs hands it over with useOnnxRuntime().
 */
import { UserError } from "../errors.mjs";
import { IN_NODE } from "../files.mjs";

/** @typedef {"node" | "wasm" | "webgpu"} Backend */
export const BACKENDS = /** @type {const} */ (["node", "wasm", "webgpu"]);

/** @type {{ort: any, wasmPaths?: string} | null} */
let given = null;

/**
 * The onnxruntime-web a page brings (its site's copy): call once before OmniVoice.load.
 * @param {any} ort the onnxruntime-web module @param {{wasmPaths?: string}} [options]
 */
export function useOnnxRuntime(ort, options = {}) {
  given = { ort, wasmPaths: options.wasmPaths };
}

/** Whether WebGPU gives an adapter here. */
async function webgpuAdapter() {
  const gpu = /** @type {any} */ (globalThis.navigator)?.gpu;
  if (!gpu) return false;
  return !!(await gpu.requestAdapter().catch(() => null));
}

/**
 * The backend to run on, and the one line saying why.
 * @param {string | undefined} asked
 * @returns {Promise<{backend: Backend, why: string}>}
 */
export async function chooseBackend(asked) {
  if (asked !== undefined && !BACKENDS.includes(/** @type {Backend} */ (asked))) {
    throw new UserError(`backend ${JSON.stringify(asked)} is not one of ${BACKENDS.join(", ")}`);
  }
  if (asked === undefined) {
    return IN_NODE ? { backend: "node", why: "node: the default under Node (onnxruntime-node's native CPU provider)" }
      : { backend: "wasm", why: "wasm: the default in a browser (onnxruntime-web's WebAssembly CPU backend)" };
  }
  if (asked === "node" && !IN_NODE) throw new UserError("backend node runs only under Node; in a browser use wasm or webgpu");
  if (asked === "webgpu") {
    if (IN_NODE) throw new UserError("backend webgpu runs only in a browser; under Node use node or wasm");
    if (!(await webgpuAdapter())) {
      throw new UserError("backend webgpu: this browser gives no WebGPU adapter; use backend wasm");
    }
    return { backend: "webgpu", why: "webgpu: asked for, and this browser gives a WebGPU adapter" };
  }
  return { backend: /** @type {Backend} */ (asked), why: `${asked}: asked for` };
}

/**
 * The ONNX Runtime module for a backend, set up for `threads`.
 * @param {Backend} backend @param {number | undefined} threads
 */
export async function onnxRuntime(backend, threads) {
  if (backend === "node") return (await import("onnxruntime-node")).default ?? (await import("onnxruntime-node"));
  const ort = given?.ort ?? (await import("onnxruntime-web"));
  if (given?.wasmPaths) ort.env.wasm.wasmPaths = given.wasmPaths;
  ort.env.logLevel = "error"; // its warnings (constant folding) reach a page's console as errors
  // Threads need a cross-origin isolated page (SharedArrayBuffer); without it onnxruntime-web runs one.
  const isolated = IN_NODE || globalThis.crossOriginIsolated === true;
  ort.env.wasm.numThreads = isolated ? (threads ?? Math.min(4, globalThis.navigator?.hardwareConcurrency ?? 1)) : 1;
  return ort;
}

// Errors only: the codec graphs' constant folding warns for every session, and a warning is no news to a user.
const QUIET = 3;

/**
 * A session's options on this backend. On the native one, only the backbone's idle workers spin, as in the Python
 * runtime (docs/DESIGN.md §spinning): a short graph's spinning workers would take the cores the backbone needs next.
 * @param {Backend} backend @param {number | undefined} threads @param {boolean} spin
 */
function sessionOptions(backend, threads, spin) {
  if (backend === "node") {
    return { executionProviders: ["cpu"], intraOpNumThreads: threads ?? 0, interOpNumThreads: 1,
      graphOptimizationLevel: "all", logSeverityLevel: QUIET,
      extra: { session: { intra_op: { allow_spinning: spin ? "1" : "0" } } } };
  }
  return { executionProviders: backend === "webgpu" ? ["webgpu", "wasm"] : ["wasm"], graphOptimizationLevel: "all",
    logSeverityLevel: QUIET };
}

/**
 * A session on one graph. `model` is the graph's path (node: onnxruntime-node reads it and its external data
 * itself) or its bytes with its external data's bytes by file name (wasm, webgpu).
 * @param {any} ort @param {Backend} backend @param {number | undefined} threads
 * @param {string | {graph: Uint8Array, external: Record<string, Uint8Array>}} model
 * @param {boolean} [spin] whether idle workers spin (the backbone's)
 */
export async function openSession(ort, backend, threads, model, spin = false) {
  const options = sessionOptions(backend, threads, spin);
  if (typeof model === "string") return ort.InferenceSession.create(model, options);
  const externalData = Object.entries(model.external).map(([path, data]) => ({ path, data }));
  return ort.InferenceSession.create(model.graph, { ...options, externalData });
}

// The x86 instruction sets whose u8 x s8 kernels sum full-range int8 weights exactly (codes/common/isa.py).
const EXACT_INT8_FLAGS = ["avx512_vnni", "avx_vnni", "amx_int8"];

/**
 * Whether this host's native kernels sum a build's int8 weights exactly. The Python runtime re-ranges full-range
 * (+-127) weights to +-63 as it opens a session on x86 without VNNI (codes/runtime/contract/int8_weights.py);
 * onnxruntime-node takes no initializers from JavaScript, so this host refuses such a build there instead of
 * speaking with saturated sums. Where the CPU's flags cannot be read (not Linux), the build is taken as it is.
 * @param {Backend} backend @param {any} manifestData
 * @returns {Promise<string | null>} null, or the one-line reason
 */
export async function int8WeightsMisfit(backend, manifestData) {
  const levels = Object.values(manifestData?.quantization?.int8 ?? {}).map((part) => /** @type {any} */ (part)?.weight_levels);
  if (backend !== "node" || !levels.some((level) => level > 63) || process.arch !== "x64") return null;
  const cpuinfo = await (await import("node:fs/promises")).readFile("/proc/cpuinfo", "utf8").catch(() => null);
  const flags = new Set(cpuinfo?.match(/^flags\s*:(.*)$/m)?.[1].trim().split(/\s+/) ?? []);
  if (cpuinfo === null || EXACT_INT8_FLAGS.some((flag) => flags.has(flag))) return null;
  return "this cpu_int8 build's full-range int8 weights would saturate this CPU's int8 kernels (x86 without VNNI), " +
    "and the JavaScript runtime cannot re-range them as the Python runtime does: use a cpu or web build here, " +
    "or backend wasm";
}
