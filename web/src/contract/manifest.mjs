/**
 * A build's omnivoice_manifest.json read and checked, as codes/runtime/contract/manifest.py does (docs/runtime.md,
 * "The build a host loads"): the same refusals in the same words, every listed file's sha256 checked as it is read.
 */
import { UserError } from "../errors.mjs";
import { IN_NODE, join, readBytes, readJson, exists } from "../files.mjs";

export const MANIFEST_NAME = "omnivoice_manifest.json";
export const FORMAT = "omnivoice-onnx";
export const FORMAT_VERSION = 2;
const CODEC_KIND = "codec";

/** The graphs of one decoding step, declared once in codes/runtime/contract/specs.py. */
export const GRAPHS = Object.freeze({
  embeddings: "audio_embeddings_encoder",
  backbone: "llm_decoder",
  heads: "audio_heads_decoder",
  scoring: "cell_scoring",
  scoringSampled: "cell_scoring_sampled",
  decoder: "higgs_decoder",
  acoustic: "acoustic_encoder",
  semantic: "semantic_encoder",
  quantizer: "quantizer_encoder",
});

/** A folder's manifest and where its files are. */
export class Manifest {
  /** @param {string} folder a path or URL @param {any} data */
  constructor(folder, data) {
    this.folder = folder;
    this.data = data;
  }

  get profile() { return /** @type {string} */ (this.data.profile ?? "unknown"); }
  get attention() { return /** @type {string} */ (this.data.attention ?? "unknown"); }
  get isCodec() { return this.data.kind === CODEC_KIND; }
  /** @returns {Record<string, any>} */
  get subModels() { return this.data.backbone ?? {}; }

  /** @param {string} name */
  location(name) { return join(this.folder, name); }

  /** A backbone graph's entry. @param {string} key */
  entry(key) {
    const entry = this.subModels[key] ?? this.data.scoring?.[key];
    if (!entry) throw new UserError(`${this.location(MANIFEST_NAME)} names no ${key} graph; rebuild with optimize.py`);
    return entry;
  }

  /** Bytes a graph and its external data take, as the manifest records them. @param {any} entry */
  static sizeOf(entry) { return Number(entry.size_bytes ?? 0); }

  /** The codec's folder, section and manifest: this folder if it is a codec build, else the codec it holds. */
  async codec() {
    if (this.isCodec) return { folder: this.folder, section: this.data.codec, manifest: /** @type {Manifest} */ (this) };
    const higgs = this.data.higgs_tokenizer;
    if (!higgs) {
      throw new UserError(`${this.folder} holds no Higgs codec: build one with \`python optimize.py --higgs-only\` ` +
        "(or --include-higgs), or point at a codec build with --higgs_dir");
    }
    const codec = await readManifest(join(this.folder, higgs.models_dir));
    if (!codec.isCodec) throw new UserError(`${codec.folder} is not a codec build; rebuild it with optimize.py --higgs-only`);
    return { folder: codec.folder, section: codec.data.codec, manifest: codec };
  }

  /**
   * A listed file's bytes, its sha256 checked against the manifest.
   * @param {string} name @param {Parameters<typeof readBytes>[1]} [options]
   */
  async read(name, options) {
    const location = this.location(name);
    const digest = this.data.files?.[name];
    if (digest === undefined) return readBytes(location, options);
    if (!(await exists(location))) {
      throw new UserError(`model folder ${this.folder} is missing ${name}, which its manifest lists; re-copy or rebuild it`);
    }
    const bytes = await readBytes(location, options);
    if ((await sha256(bytes)) !== digest) throw changed(location);
    return bytes;
  }

  /** A listed file checked where it lies (Node paths: what onnxruntime-node opens itself). @param {string} name */
  async verify(name) {
    const digest = this.data.files?.[name];
    const location = this.location(name);
    if (!(await exists(location))) {
      throw new UserError(`model folder ${this.folder} is missing ${name}, which its manifest lists; re-copy or rebuild it`);
    }
    if (digest !== undefined && (await sha256File(location)) !== digest) throw changed(location);
    return location;
  }
}

/** @param {string} location */
function changed(location) {
  return new UserError(`${location} does not match its sha256 in ${MANIFEST_NAME}; the file changed after the build, ` +
    "re-copy the folder or rebuild it with optimize.py");
}

/** @param {Uint8Array} bytes @returns {Promise<string>} */
export async function sha256(bytes) {
  if (IN_NODE) return (await import("node:crypto")).createHash("sha256").update(bytes).digest("hex");
  const digest = await crypto.subtle.digest("SHA-256", /** @type {Uint8Array<ArrayBuffer>} */ (bytes));
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** A file's sha256, streamed (graphs run to gigabytes). @param {string} path */
async function sha256File(path) {
  const { createHash } = await import("node:crypto");
  const { createReadStream } = await import("node:fs");
  const hash = createHash("sha256");
  for await (const chunk of createReadStream(path.startsWith("file:") ? new URL(path) : path)) hash.update(chunk);
  return hash.digest("hex");
}

/**
 * Load and check a build folder's manifest; every problem is a one-line UserError.
 * @param {string} folder @param {{fetchFile?: (url: string) => Promise<Response>}} [options]
 */
export async function readManifest(folder, options = {}) {
  const location = join(folder, MANIFEST_NAME);
  if (IN_NODE && !/^[a-z]+:\/\//i.test(folder)) {
    const fs = await import("node:fs/promises");
    const stat = await fs.stat(folder).catch(() => null);
    if (!stat?.isDirectory()) {
      throw new UserError(`model folder ${folder} does not exist; build one with optimize.py --output ${folder}`);
    }
  }
  if (!(await exists(location))) {
    throw new UserError(`${folder} has no ${MANIFEST_NAME}; it is not an omnivoice-onnx build (make one with optimize.py)`);
  }
  const data = await readJson(location, options);
  if (data === null || typeof data !== "object" || Array.isArray(data)) {
    throw new UserError(`${location} is not a JSON object; rebuild the folder with optimize.py`);
  }
  if (data.format !== FORMAT) {
    throw new UserError(`${location} is not an omnivoice-onnx manifest (format ${JSON.stringify(data.format ?? null)}); ` +
      "rebuild with optimize.py");
  }
  if (data.format_version !== FORMAT_VERSION) {
    throw new UserError(`${location} has format_version ${data.format_version}, this toolkit reads ${FORMAT_VERSION}; ` +
      "rebuild with optimize.py");
  }
  return new Manifest(folder, data);
}
