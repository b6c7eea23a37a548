/**
 * Reading a build's files wherever the runtime runs: a filesystem path or file: URL under Node, any other
 * URL through fetch (with download progress). The one place the runtime touches I/O for reading.
 */
import { UserError } from "./errors.mjs";

export const IN_NODE = typeof process !== "undefined" && !!process.versions?.node;

/**
 * @typedef {{file: string, loaded: number, total: number}} DownloadProgress
 * @typedef {(progress: DownloadProgress) => void} OnDownload
 */

/**
 * A location inside a base: `base` is a folder path or URL (with or without a trailing slash).
 * @param {string | URL} base
 * @param {string} name a relative path with "/" separators
 * @returns {string}
 */
export function join(base, name) {
  const text = String(base);
  if (isUrl(text)) return new URL(name, text.endsWith("/") ? text : text + "/").href;
  return text.replace(/\/+$/, "") + "/" + name;
}

/** @param {string} text */
function isUrl(text) {
  return /^[a-z][a-z0-9+.-]*:\/\//i.test(text) || text.startsWith("file:") || text.startsWith("blob:");
}

/** @param {string} location @returns {Promise<string | null>} the filesystem path, or null for a web URL */
async function localPath(location) {
  if (!IN_NODE) return null;
  if (location.startsWith("file:")) return (await import("node:url")).fileURLToPath(location);
  return isUrl(location) ? null : location;
}

/**
 * A file's bytes.
 * @param {string} location
 * @param {{onDownload?: OnDownload, fetchFile?: (url: string) => Promise<Response>}} [options]
 * @returns {Promise<Uint8Array>}
 */
export async function readBytes(location, options = {}) {
  const path = await localPath(location);
  if (path !== null) {
    const fs = await import("node:fs/promises");
    try {
      return new Uint8Array(await fs.readFile(path));
    } catch (error) {
      throw new UserError(`cannot read ${path}: ${/** @type {any} */ (error).code ?? error}`);
    }
  }
  const response = await (options.fetchFile ?? fetch)(location);
  if (!response.ok) throw new UserError(`cannot fetch ${location}: HTTP ${response.status}`);
  const total = Number(response.headers.get("content-length") ?? 0);
  if (!options.onDownload || !response.body) return new Uint8Array(await response.arrayBuffer());
  const reader = response.body.getReader();
  const parts = [];
  let loaded = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    parts.push(value);
    loaded += value.length;
    options.onDownload({ file: location, loaded, total });
  }
  const bytes = new Uint8Array(loaded);
  let at = 0;
  for (const part of parts) {
    bytes.set(part, at);
    at += part.length;
  }
  return bytes;
}

/** @param {string} location @param {Parameters<typeof readBytes>[1]} [options] @returns {Promise<string>} */
export async function readText(location, options) {
  return new TextDecoder().decode(await readBytes(location, options));
}

/** @param {string} location @param {Parameters<typeof readBytes>[1]} [options] @returns {Promise<any>} */
export async function readJson(location, options) {
  const text = await readText(location, options);
  try {
    return JSON.parse(text);
  } catch {
    throw new UserError(`${location} is not JSON`);
  }
}

/** Whether a file exists (Node paths) or answers (URLs). @param {string} location */
export async function exists(location) {
  const path = await localPath(location);
  if (path !== null) {
    const fs = await import("node:fs/promises");
    return fs.stat(path).then(() => true, () => false);
  }
  const response = await fetch(location, { method: "HEAD" }).catch(() => null);
  return !!response?.ok;
}
