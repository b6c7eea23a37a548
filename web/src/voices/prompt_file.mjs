/**
 * Upstream's saved voice prompts (.pt), read and written without torch and without trusting pickle: the port of
 * codes/runtime/voices/prompt_file.py (docs/runtime.md, "Reference clips": a voice is codes [8, T], transcript, rms).
 *
 * Upstream 0.2.1's `VoiceClonePrompt.save` is a `torch.save` of {"format_version": 1, "ref_audio_tokens": int64
 * [8, T], "ref_text": str, "ref_rms": float}; wyoming-piper caches the same dict without "format_version" as
 * `ref.rvq`. torch.save writes a zip: `<archive>/data.pkl`, a protocol-2 pickle in which each tensor is a call of
 * torch._utils._rebuild_tensor_v2 on a storage named by a persistent id, and `<archive>/data/<key>`, each
 * storage's raw bytes, plus `byteorder` and `version`.
 *
 * Reading runs that pickle on a small machine here that knows only the opcodes such a file uses and only the
 * globals a dict of tensors needs; any other global is refused by name before anything is called, and nothing
 * in the file is ever executed. Every size is checked before it is read: the file, each zip member (declared,
 * and as it inflates, through fflate), each storage's claimed element count. The messages are the Python side's.
 * Writing emits the bytes prompt_bytes writes, byte for byte, so torch.load(weights_only=True) reads them.
 */
import { Inflate } from "fflate";
import { UserError } from "../errors.mjs";
import { reprFloat, reprString, strip } from "../text/python.mjs";

import { CODEBOOK_SIZE, FRAME_RATE, NUM_CODEBOOKS } from "../contract/specs.mjs";

export { CODEBOOK_SIZE, NUM_CODEBOOKS };
export const FORMAT_VERSION = 1; // upstream's _VOICE_CLONE_PROMPT_FORMAT_VERSION
export const MAX_FRAMES = 10 * 60 * FRAME_RATE; // ten minutes of reference: upstream advises 3-10 s
export const MAX_ELEMENTS = NUM_CODEBOOKS * MAX_FRAMES;
export const MAX_PICKLE_BYTES = 1 << 20; // the dict's pickle: a transcript and a few numbers
export const MAX_MEMBERS = 64;
export const MAX_FILE_BYTES = 4 * MAX_PICKLE_BYTES + MAX_ELEMENTS * 8; // under 6 MB: far past any real prompt
export const ALIGNMENT = 64; // torch aligns each storage's bytes in the file (for mmap=True)
export const SUFFIX = ".pt";

/** A voice file that is not one, or not a safe one; `problem` holds the problem alone. */
export class PromptFileError extends UserError {
  /** @param {string} message @param {string} [problem] */
  constructor(message, problem = "") {
    super(message);
    this.name = "PromptFileError";
    this.problem = problem;
  }
}

/** @param {string} what @returns {never} */
export function refuse(what) {
  throw new PromptFileError(what);
}

/** The first line of an error, as _first_line writes it (120 characters at most). @param {any} error */
export function firstLine(error) {
  const text = String(error?.message ?? error ?? "");
  return (text.split(/\r\n|\r|\n/).find((line) => line !== "") ?? error?.name ?? "Error").slice(0, 120);
}

// --- the zip ---------------------------------------------------------------------------------------------------

/** Python's zipfile errors, by their type name, for the messages that quote them. */
class ZipProblem extends Error {
  /** @param {string} type @param {string} [message] */
  constructor(type, message = "") {
    super(message || type);
    this.type = type;
  }
}

const LOCAL = 0x04034b50;
const CENTRAL = 0x02014b50;
const END = 0x06054b50;
const END64 = 0x06064b50;
const END64_LOCATOR = 0x07064b50;
const UTF8_NAME = 0x800;
const MAX_EXTRACT_VERSION = 63;

let crcTable = /** @type {Uint32Array | null} */ (null);

/** zlib's CRC-32. @param {Uint8Array} bytes */
export function crc32(bytes) {
  if (crcTable === null) {
    crcTable = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      crcTable[n] = c >>> 0;
    }
  }
  let crc = 0xffffffff;
  for (let i = 0; i < bytes.length; i++) crc = crcTable[(crc ^ bytes[i]) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

/** @param {Uint8Array} bytes @param {boolean} utf8 */
function decodeName(bytes, utf8) {
  // zipfile decodes names without the UTF-8 flag as cp437; the names a voice file needs are ASCII either way.
  return utf8 ? new TextDecoder().decode(bytes) : String.fromCharCode(...bytes);
}

/**
 * The End Of Central Directory record as zipfile's _EndRecData finds it (with its zip64 record, if any).
 * @param {Uint8Array} data @param {DataView} view
 */
function endRecord(data, view) {
  const size = data.length;
  if (size < 22) return null;
  let at = -1;
  if (view.getUint32(size - 22, true) === END && view.getUint16(size - 2, true) === 0) at = size - 22;
  else {
    const from = Math.max(size - (1 << 16) - 22, 0);
    for (let i = size - 4; i >= from; i--) {
      if (view.getUint32(i, true) === END) {
        at = i;
        break;
      }
    }
    if (at < 0 || at + 22 > size) return null;
  }
  const record = { at, zip64: false, count: view.getUint16(at + 10, true), sizeCd: view.getUint32(at + 12, true),
    offsetCd: view.getUint32(at + 16, true) };
  const locator = at - 20;
  if (locator < 0 || view.getUint32(locator, true) !== END64_LOCATOR) return record;
  if (view.getUint32(locator + 4, true) !== 0 || view.getUint32(locator + 16, true) > 1) {
    throw new ZipProblem("BadZipFile", "zipfiles that span multiple disks are not supported");
  }
  const start = locator - 56;
  if (start < 0 || view.getUint32(start, true) !== END64) return record;
  return { at, zip64: true, count: Number(view.getBigUint64(start + 32, true)),
    sizeCd: Number(view.getBigUint64(start + 40, true)), offsetCd: Number(view.getBigUint64(start + 48, true)) };
}

/**
 * @typedef {{name: string, flags: number, method: number, crc: number, compressedSize: number, size: number,
 *   offset: number}} ZipEntry
 */

/**
 * A zip's central directory as zipfile.ZipFile reads it: ZipProblem where zipfile raises.
 * @param {Uint8Array} data
 * @returns {ZipEntry[]}
 */
export function zipEntries(data) {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const end = endRecord(data, view);
  if (end === null) throw new ZipProblem("BadZipFile", "File is not a zip file");
  const concat = end.at - end.sizeCd - end.offsetCd - (end.zip64 ? 56 + 20 : 0);
  const startDir = end.offsetCd + concat;
  if (startDir < 0) throw new ZipProblem("BadZipFile", "Bad offset for central directory");
  const directory = data.subarray(startDir, startDir + end.sizeCd);
  const dir = new DataView(directory.buffer, directory.byteOffset, directory.byteLength);
  /** @type {ZipEntry[]} */
  const entries = [];
  let total = 0;
  while (total < end.sizeCd) {
    if (total + 46 > directory.length) throw new ZipProblem("BadZipFile", "Truncated central directory");
    if (dir.getUint32(total, true) !== CENTRAL) throw new ZipProblem("BadZipFile", "Bad magic number for central directory");
    const nameLength = dir.getUint16(total + 28, true);
    const extraLength = dir.getUint16(total + 30, true);
    const commentLength = dir.getUint16(total + 32, true);
    const flags = dir.getUint16(total + 8, true);
    const nameStart = total + 46;
    const name = decodeName(directory.subarray(nameStart, nameStart + nameLength), (flags & UTF8_NAME) !== 0);
    const extra = directory.subarray(nameStart + nameLength, nameStart + nameLength + extraLength);
    if (dir.getUint8(total + 6) > MAX_EXTRACT_VERSION) throw new ZipProblem("NotImplementedError", "zip file version");
    const entry = { name, flags, method: dir.getUint16(total + 10, true), crc: dir.getUint32(total + 16, true),
      compressedSize: dir.getUint32(total + 20, true), size: dir.getUint32(total + 24, true),
      offset: dir.getUint32(total + 42, true) };
    decodeZip64(entry, extra);
    entry.offset += concat;
    entries.push(entry);
    total += 46 + nameLength + extraLength + commentLength;
  }
  return entries;
}

/** ZipInfo._decodeExtra: sizes and offset from a zip64 extra field where the 32-bit ones are full. */
function decodeZip64(/** @type {ZipEntry} */ entry, /** @type {Uint8Array} */ extra) {
  const view = new DataView(extra.buffer, extra.byteOffset, extra.byteLength);
  let at = 0;
  while (extra.length - at >= 4) {
    const type = view.getUint16(at, true);
    const length = view.getUint16(at + 2, true);
    if (at + 4 + length > extra.length) {
      throw new ZipProblem("BadZipFile", `Corrupt extra field ${type.toString(16).padStart(4, "0")} (size=${length})`);
    }
    if (type === 1) {
      let field = at + 4;
      const fieldEnd = at + 4 + length;
      const take = (/** @type {string} */ what) => {
        if (field + 8 > fieldEnd) throw new ZipProblem("BadZipFile", `Corrupt zip64 extra field. ${what} not found.`);
        const value = Number(view.getBigUint64(field, true));
        field += 8;
        return value;
      };
      if (entry.size === 0xffffffff) entry.size = take("File size");
      if (entry.compressedSize === 0xffffffff) entry.compressedSize = take("Compress size");
      if (entry.offset === 0xffffffff) entry.offset = take("Header offset");
    }
    at += 4 + length;
  }
}

const COMPRESSION_NAMES = { 12: "bzip2", 14: "lzma" };

/**
 * A member's bytes as zipfile's ZipExtFile gives them: at most its declared size, inflated by fflate a little at a
 * time (a member that inflates past what it declares stops there), its CRC checked at the end.
 * @param {Uint8Array} data @param {ZipEntry} entry
 */
function memberBytes(data, entry) {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const at = entry.offset;
  if (at < 0 || at + 30 > data.length) throw new ZipProblem("BadZipFile", "Truncated file header");
  if (view.getUint32(at, true) !== LOCAL) throw new ZipProblem("BadZipFile", "Bad magic number for file header");
  const nameLength = view.getUint16(at + 26, true);
  const extraLength = view.getUint16(at + 28, true);
  const localFlags = view.getUint16(at + 6, true);
  const localName = decodeName(data.subarray(at + 30, at + 30 + nameLength), (localFlags & UTF8_NAME) !== 0);
  if (entry.flags & 0x20) throw new ZipProblem("NotImplementedError", "compressed patched data (flag bit 5)");
  if (entry.flags & 0x40) throw new ZipProblem("NotImplementedError", "strong encryption (flag bit 6)");
  if (localName !== entry.name) {
    throw new ZipProblem("BadZipFile", `File name in directory ${reprString(entry.name)} and header ${reprString(localName)} differ.`);
  }
  if (entry.flags & 0x1) {
    throw new ZipProblem("RuntimeError", `File ${reprString(entry.name)} is encrypted, password required for extraction`);
  }
  const start = at + 30 + nameLength + extraLength;
  const compressed = data.subarray(Math.min(start, data.length), Math.min(start + entry.compressedSize, data.length));
  let out;
  if (entry.method === 0) {
    if (compressed.length < Math.min(entry.compressedSize, entry.size)) throw new ZipProblem("EOFError");
    out = compressed.subarray(0, Math.min(entry.compressedSize, entry.size));
  } else if (entry.method === 8) {
    out = inflateBounded(compressed, entry.size, entry.compressedSize);
  } else {
    const known = /** @type {Record<number, string>} */ (COMPRESSION_NAMES)[entry.method];
    throw new ZipProblem("NotImplementedError",
      known ? `compression type ${entry.method} (${known})` : "That compression method is not supported");
  }
  if (crc32(out) !== entry.crc) throw new ZipProblem("BadZipFile", `Bad CRC-32 for file ${reprString(entry.name)}`);
  return out;
}

const INFLATE_STEP = 1024; // compressed bytes pushed at a time: about a megabyte out at most

/**
 * Raw deflate data inflated up to `most` bytes: what comes after is never made.
 * @param {Uint8Array} compressed @param {number} most @param {number} declaredCompressed
 */
function inflateBounded(compressed, most, declaredCompressed) {
  const out = new Uint8Array(most);
  let length = 0;
  let ended = false;
  const inflate = new Inflate((chunk, final) => {
    const room = most - length;
    out.set(room < chunk.length ? chunk.subarray(0, room) : chunk, length);
    length += Math.min(room, chunk.length);
    if (final) ended = true;
  });
  try {
    for (let at = 0; at < compressed.length && length < most && !ended; at += INFLATE_STEP) {
      const piece = compressed.subarray(at, at + INFLATE_STEP);
      inflate.push(piece, at + INFLATE_STEP >= compressed.length);
    }
  } catch (error) {
    // A stream cut short ends where its bytes do (zipfile then checks the CRC of what came out); any other
    // fault is a damaged member.
    if (!/unexpected EOF/i.test(firstLine(error))) throw new ZipProblem("error", `Error -3 while decompressing data: ${firstLine(error)}`);
  }
  if (!ended && length < most && compressed.length < declaredCompressed) throw new ZipProblem("EOFError");
  return out.subarray(0, length);
}

/** A voice file's zip, its members checked before any is read (prompt_file.py _Zip). */
export class Zip {
  /** @param {Uint8Array} data */
  constructor(data) {
    if (data.length > MAX_FILE_BYTES) refuse(`it is ${data.length} bytes, past the ${MAX_FILE_BYTES} a voice file may be`);
    this.data = data;
    /** @type {ZipEntry[]} */
    let entries = [];
    try {
      entries = zipEntries(data);
    } catch (error) {
      if (!(error instanceof ZipProblem)) throw error;
      refuse("it is a damaged or truncated zip");
    }
    if (entries.length > MAX_MEMBERS) refuse(`its zip holds ${entries.length} members; a voice file has fewer than ten`);
    /** @type {Map<string, ZipEntry>} */
    this.members = new Map(entries.map((entry) => [entry.name, entry]));
  }

  /**
   * A member's bytes, refused from its declared size, and read no further than that.
   * @param {string} name @param {number} most
   */
  read(name, most) {
    const member = this.members.get(name);
    if (member === undefined) refuse(`its zip has no member ${name}`);
    if (member.size > most) refuse(`its member ${name} claims ${member.size} bytes, past the ${most} it may hold`);
    let data;
    try {
      data = memberBytes(this.data, member);
    } catch (error) {
      if (!(error instanceof ZipProblem)) throw error;
      refuse(`its member ${name} cannot be read (${firstLine(error)}); the zip is damaged`);
    }
    if (data.length !== member.size) refuse(`its member ${name} holds ${data.length} bytes where it declares ${member.size}`);
    return data;
  }
}

// --- the values a pickle makes -----------------------------------------------------------------------------------

/** A Python float (a JS number is an int here). */
export class PyFloat {
  /** @param {number} value */
  constructor(value) { this.value = value; }
}

/** A Python tuple. */
export class PyTuple {
  /** @param {any[]} items */
  constructor(items) { this.items = items; }
}

/** A torch storage dtype: its numpy name, item size and kind. @typedef {{name: string, itemsize: number, kind: string}} DType */

/** @type {Record<string, DType>} torch's storage types -> their elements (little-endian; byteorder may flip them). */
export const STORAGE_DTYPES = {
  LongStorage: { name: "int64", itemsize: 8, kind: "i" },
  IntStorage: { name: "int32", itemsize: 4, kind: "i" },
  ShortStorage: { name: "int16", itemsize: 2, kind: "i" },
  CharStorage: { name: "int8", itemsize: 1, kind: "i" },
  ByteStorage: { name: "uint8", itemsize: 1, kind: "u" },
  BoolStorage: { name: "bool", itemsize: 1, kind: "b" },
  DoubleStorage: { name: "float64", itemsize: 8, kind: "f" },
  FloatStorage: { name: "float32", itemsize: 4, kind: "f" },
  HalfStorage: { name: "float16", itemsize: 2, kind: "f" },
};

// What the machine hands to the pickle: each a tuple subclass in Python, with nothing a pickle can set.

/** An allowed function: called with the pickle's arguments. */
class Global {
  /** @param {string} name @param {(...args: any[]) => any} fn */
  constructor(name, fn) { this.name = name; this.fn = fn; }
}

/** torch.<X>Storage: never called. */
class StorageType {
  /** @param {string} name @param {DType} dtype */
  constructor(name, dtype) { this.name = name; this.dtype = dtype; }
}

/** A storage's elements, read from the zip. */
class Storage {
  /** @param {Uint8Array} bytes @param {DType} dtype @param {boolean} bigEndian */
  constructor(bytes, dtype, bigEndian) {
    this.bytes = bytes;
    this.dtype = dtype;
    this.bigEndian = bigEndian;
    this.size = bytes.length / dtype.itemsize;
  }
}

/** A rebuilt tensor: its dtype, shape and C-order elements. */
export class Tensor {
  /** @param {DType} dtype @param {number[]} shape @param {ArrayLike<number | bigint>} values */
  constructor(dtype, shape, values) { this.dtype = dtype; this.shape = shape; this.values = values; }
}

/** type(value).__name__ @param {any} value */
export function typeName(value) {
  if (value === null || value === undefined) return "NoneType";
  if (typeof value === "boolean") return "bool";
  if (typeof value === "number" || typeof value === "bigint") return "int";
  if (typeof value === "string") return "str";
  if (value instanceof PyFloat) return "float";
  if (value instanceof PyTuple) return "tuple";
  if (Array.isArray(value)) return "list";
  if (value instanceof Map) return "dict";
  if (value instanceof Global) return "_Global";
  if (value instanceof StorageType) return "_StorageType";
  if (value instanceof Storage) return "_Storage";
  if (value instanceof Tensor) return "_Tensor";
  return "object";
}

/** Python's truth of a value. @param {any} value */
function truthy(value) {
  if (value === null || value === undefined || value === false) return false;
  if (typeof value === "number") return value !== 0;
  if (typeof value === "bigint") return value !== 0n;
  if (typeof value === "string" || Array.isArray(value)) return value.length > 0;
  if (value instanceof PyFloat) return value.value !== 0;
  if (value instanceof PyTuple) return value.items.length > 0;
  if (value instanceof Map) return value.size > 0;
  return true; // the tuple subclasses all hold one or two items
}

/** Python's repr() of a value a pickle made, as far as a message shows one. @param {any} value @param {number} [depth] */
export function pyRepr(value, depth = 0) {
  if (depth > 20) return "...";
  if (value === null || value === undefined) return "None";
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "number" || typeof value === "bigint") return String(value);
  if (typeof value === "string") return reprString(value);
  if (value instanceof PyFloat) return reprFloat(value.value);
  const all = (/** @type {any[]} */ items) => items.slice(0, 50).map((item) => pyRepr(item, depth + 1)).join(", ");
  if (value instanceof PyTuple) return value.items.length === 1 ? `(${all(value.items)},)` : `(${all(value.items)})`;
  if (Array.isArray(value)) return `[${all(value)}]`;
  if (value instanceof Map) {
    return `{${[...value].slice(0, 50).map(([k, v]) => `${pyRepr(k, depth + 1)}: ${pyRepr(v, depth + 1)}`).join(", ")}}`;
  }
  if (value instanceof Global) return `(<function ${value.name}>,)`;
  if (value instanceof StorageType) return `(${reprString(value.name)}, dtype(${reprString(value.dtype.name)}))`;
  if (value instanceof Tensor) return `(array(shape=${pyRepr(new PyTuple(value.shape))}, dtype=${value.dtype.name}),)`;
  return "(<storage>,)";
}

/** A dict key as Python hashes it: equal numbers are one key, whatever their type. @param {any} key */
function dictKey(key) {
  if (Array.isArray(key) || key instanceof Map) throw new Malformed("TypeError");
  if (key instanceof PyFloat) return Number.isInteger(key.value) ? key.value : key;
  if (typeof key === "boolean") return key ? 1 : 0;
  if (typeof key === "bigint" && Number.isSafeInteger(Number(key))) return Number(key);
  return key;
}

/** A pickle that is no pickle: the Python exception's type names it. */
class Malformed extends Error {
  /** @param {string} type */
  constructor(type) {
    super(type);
    this.type = type;
  }
}

// --- the globals a voice prompt uses --------------------------------------------------------------------------

/** collections.OrderedDict(): a tensor's backward hooks, or the dict torch saves (items come after). */
function emptyOrderedDict(/** @type {any[]} */ ...args) {
  if (args.length > 0) refuse("an OrderedDict built from arguments (torch.save never writes one)");
  return new Map();
}

/** @param {any} value */
const isInt = (value) => typeof value === "number" || typeof value === "bigint";

/**
 * torch._utils._rebuild_tensor_v2, as a typed array copied out of the storage after bounds checks.
 * @param {any[]} args
 */
function rebuildTensorV2(...args) {
  if (args.length < 4 || args.length > 7) throw new Malformed("TypeError");
  const [storage, storageOffset, size, stride, , backwardHooks = null, metadata = null] = args;
  if (!(storage instanceof Storage)) refuse("a tensor without a storage");
  const ints = size instanceof PyTuple && stride instanceof PyTuple ? [storageOffset, ...size.items, ...stride.items] : null;
  if (ints === null || size.items.length !== stride.items.length || size.items.length > 4 ||
      !ints.every((v) => isInt(v) && BigInt(v) >= 0n)) {
    refuse("a tensor with a malformed shape or stride");
  }
  if (truthy(backwardHooks) || truthy(metadata)) refuse("a tensor with hooks or metadata (torch.save of plain tokens has none)");
  const shape = /** @type {(number | bigint)[]} */ (size.items);
  const count = shape.reduce((/** @type {bigint} */ p, n) => p * BigInt(n), 1n);
  if (count > BigInt(MAX_ELEMENTS)) {
    refuse(`a tensor of shape [${shape.join(", ")}], past the ${MAX_ELEMENTS} elements a voice's codes may have`);
  }
  const strides = /** @type {(number | bigint)[]} */ (stride.items);
  const reach = shape.reduce((/** @type {bigint} */ sum, n, i) => sum + (BigInt(n) - 1n) * BigInt(strides[i]), BigInt(storageOffset));
  if (count > 0n && reach >= BigInt(storage.size)) {
    refuse(`a tensor of shape [${shape.join(", ")}] that reaches past its storage of ${storage.size} elements`);
  }
  const dims = shape.map(Number);
  const values = typedArray(storage.dtype, Number(count));
  if (count === 0n) return new Tensor(storage.dtype, dims, values);
  // Within the storage now: every stride that moves is below its size (a dimension of 1 never moves).
  const steps = dims.map((n, i) => (n === 1 ? 0 : Number(strides[i])));
  copyStrided(storage, Number(storageOffset), dims, steps, values);
  return new Tensor(storage.dtype, dims, values);
}

/** An empty typed array of a dtype's elements (float16 kept as its bits). @param {DType} dtype @param {number} count */
function typedArray(dtype, count) {
  switch (dtype.name) {
    case "int64": return new BigInt64Array(count);
    case "int32": return new Int32Array(count);
    case "int16": return new Int16Array(count);
    case "int8": return new Int8Array(count);
    case "float64": return new Float64Array(count);
    case "float32": return new Float32Array(count);
    case "float16": return new Uint16Array(count);
    default: return new Uint8Array(count); // uint8, bool
  }
}

/**
 * The elements a tensor's shape and strides pick from its storage, in C order.
 * @param {Storage} storage @param {number} offset @param {number[]} dims @param {number[]} steps
 * @param {any} out
 */
function copyStrided(storage, offset, dims, steps, out) {
  const view = new DataView(storage.bytes.buffer, storage.bytes.byteOffset, storage.bytes.byteLength);
  const little = !storage.bigEndian;
  const size = storage.dtype.itemsize;
  const read = {
    int64: (/** @type {number} */ at) => view.getBigInt64(at, little),
    int32: (/** @type {number} */ at) => view.getInt32(at, little),
    int16: (/** @type {number} */ at) => view.getInt16(at, little),
    int8: (/** @type {number} */ at) => view.getInt8(at),
    uint8: (/** @type {number} */ at) => view.getUint8(at),
    bool: (/** @type {number} */ at) => view.getUint8(at),
    float64: (/** @type {number} */ at) => view.getFloat64(at, little),
    float32: (/** @type {number} */ at) => view.getFloat32(at, little),
    float16: (/** @type {number} */ at) => view.getUint16(at, little),
  }[storage.dtype.name];
  const full = [...dims];
  const fullSteps = [...steps];
  while (full.length < 4) {
    full.unshift(1);
    fullSteps.unshift(0);
  }
  let k = 0;
  for (let a = 0; a < full[0]; a++) {
    for (let b = 0; b < full[1]; b++) {
      for (let c = 0; c < full[2]; c++) {
        const base = offset + a * fullSteps[0] + b * fullSteps[1] + c * fullSteps[2];
        for (let d = 0; d < full[3]; d++) out[k++] = read(size * (base + d * fullSteps[3]));
      }
    }
  }
}

/** @type {Map<string, Global | StorageType>} "module\nname" -> what the pickle gets */
const ALLOWED_GLOBALS = new Map();
ALLOWED_GLOBALS.set("torch._utils\n_rebuild_tensor_v2", new Global("_rebuild_tensor_v2", rebuildTensorV2));
ALLOWED_GLOBALS.set("collections\nOrderedDict", new Global("_empty_ordered_dict", emptyOrderedDict));
for (const [name, dtype] of Object.entries(STORAGE_DTYPES)) ALLOWED_GLOBALS.set(`torch\n${name}`, new StorageType(name, dtype));

/** find_class: the allowed globals, and nothing else. @param {string} module @param {string} name */
function findClass(module, name) {
  const target = ALLOWED_GLOBALS.get(`${module}\n${name}`);
  if (target === undefined) {
    refuse(`its pickle asks for the global ${module}.${name}, which a voice prompt never needs (refused, nothing was run)`);
  }
  return target;
}

// --- torch.save's archive ----------------------------------------------------------------------------------------

/** torch.save's zip (prompt_file.py _Archive). */
class Archive extends Zip {
  /** @param {Uint8Array} data */
  constructor(data) {
    super(data);
    const pickles = [...this.members.keys()].filter((n) => n === "data.pkl" || n.endsWith("/data.pkl"));
    if (pickles.length !== 1) refuse("it is a zip without exactly one data.pkl, so not a torch.save file");
    this.prefix = pickles[0].slice(0, -"data.pkl".length);
    const order = this.members.has(this.prefix + "byteorder") ? stripBytes(this.read(this.prefix + "byteorder", 16)) : null;
    const orderText = order === null ? "little" : String.fromCharCode(...order);
    if (orderText !== "little" && orderText !== "big") {
      refuse(`its byteorder is ${bytesRepr(/** @type {Uint8Array} */ (order).subarray(0, 16))}, neither little nor big`);
    }
    this.bigEndian = orderText === "big";
    this.pickleBytes = this.read(pickles[0], MAX_PICKLE_BYTES);
    /** @type {Map<string, Storage>} */
    this.storages = new Map();
  }

  /** @param {string} key @param {DType} dtype @param {number | bigint} numel */
  storage(key, dtype, numel) {
    if (!/^[0-9]{1,9}$/.test(key)) refuse(`a storage key ${reprString([...key].slice(0, 20).join(""))} that is not a number`);
    if (BigInt(numel) < 0n || BigInt(numel) > BigInt(MAX_ELEMENTS)) { // before a byte of it is read
      refuse(`a storage that claims ${numel} elements (${BigInt(numel) * BigInt(dtype.itemsize)} bytes), past the ` +
        `${MAX_ELEMENTS} a voice's codes may have (${Math.floor(MAX_FRAMES / FRAME_RATE / 60)} minutes)`);
    }
    const bytes = Number(numel) * dtype.itemsize;
    const raw = this.read(`${this.prefix}data/${key}`, bytes);
    if (raw.length !== bytes) refuse(`its storage ${key} holds ${raw.length} bytes for ${numel} elements of ${dtype.itemsize}`);
    return new Storage(raw, dtype, this.bigEndian && dtype.itemsize > 1);
  }

  /** persistent_load: ("storage", torch.<X>Storage, key, location, numel), each storage read once. @param {any} pid */
  persistentLoad(pid) {
    const items = pid instanceof PyTuple ? pid.items : null;
    if (!(items && items.length === 5 && items[0] === "storage" && items[1] instanceof StorageType &&
        typeof items[2] === "string" && typeof items[3] === "string" && isInt(items[4]))) {
      refuse("a persistent id that is not a torch storage");
    }
    const [, storageType, key, , numel] = items;
    if (!this.storages.has(key)) this.storages.set(key, this.storage(key, storageType.dtype, numel));
    return this.storages.get(key);
  }
}

/** bytes.strip(): ASCII white space off both ends. @param {Uint8Array} bytes */
function stripBytes(bytes) {
  const space = (/** @type {number} */ b) => b === 32 || (b >= 9 && b <= 13);
  let start = 0;
  let end = bytes.length;
  while (start < end && space(bytes[start])) start++;
  while (end > start && space(bytes[end - 1])) end--;
  return bytes.subarray(start, end);
}

/** Python's repr() of bytes. @param {Uint8Array} bytes */
export function bytesRepr(bytes) {
  const hasSingle = bytes.includes(39);
  const quote = hasSingle && !bytes.includes(34) ? '"' : "'";
  let out = "b" + quote;
  for (const b of bytes) {
    if (b === 92 || (b === 39 && quote === "'")) out += "\\" + String.fromCharCode(b);
    else if (b === 9) out += "\\t";
    else if (b === 10) out += "\\n";
    else if (b === 13) out += "\\r";
    else if (b < 32 || b >= 127) out += "\\x" + b.toString(16).padStart(2, "0");
    else out += String.fromCharCode(b);
  }
  return out + quote;
}

// --- the pickle machine ------------------------------------------------------------------------------------------

/** UTF-8 as Python's unpickler decodes it ("surrogatepass": an encoded lone surrogate is kept). @param {Uint8Array} bytes */
export function decodeUtf8(bytes) {
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    // Only encoded surrogates (ED A0..BF xx) are left to allow; anything else is Python's UnicodeDecodeError.
  }
  let out = "";
  for (let i = 0; i < bytes.length;) {
    const b = bytes[i];
    if (b < 0x80) {
      out += String.fromCharCode(b);
      i++;
      continue;
    }
    const need = b >= 0xf0 && b <= 0xf4 ? 3 : b >= 0xe0 && b <= 0xef ? 2 : b >= 0xc2 && b <= 0xdf ? 1 : -1;
    if (need < 0 || i + need >= bytes.length) throw new Malformed("UnicodeDecodeError");
    let code = b & (need === 1 ? 0x1f : need === 2 ? 0x0f : 0x07);
    for (let k = 1; k <= need; k++) {
      const next = bytes[i + k];
      if ((next & 0xc0) !== 0x80) throw new Malformed("UnicodeDecodeError");
      code = (code << 6) | (next & 0x3f);
    }
    const least = need === 1 ? 0x80 : need === 2 ? 0x800 : 0x10000;
    if (code < least || code > 0x10ffff) throw new Malformed("UnicodeDecodeError");
    out += String.fromCodePoint(code);
    i += need + 1;
  }
  return out;
}

/**
 * Run a torch.save pickle on the allowed globals: the value it builds. The opcodes are protocol 2's (what
 * torch.save writes) and the four protocol 4 adds for the same values; any other is refused.
 * @param {Archive} archive
 */
function unpickle(archive) {
  const data = archive.pickleBytes;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  let at = 0;
  /** @type {any[]} */
  let stack = [];
  /** @type {any[][]} */
  const marks = [];
  /** @type {Map<number, any>} */
  const memo = new Map();
  const need = (/** @type {number} */ n) => {
    if (at + n > data.length) throw new Malformed("UnpicklingError"); // "pickle data was truncated"
    const start = at;
    at += n;
    return start;
  };
  const pop = () => {
    if (stack.length === 0) throw new Malformed("UnpicklingError"); // "unpickling stack underflow"
    return stack.pop();
  };
  const top = () => {
    if (stack.length === 0) throw new Malformed("UnpicklingError");
    return stack[stack.length - 1];
  };
  const popMark = () => {
    if (marks.length === 0) throw new Malformed("UnpicklingError"); // "could not find MARK"
    const items = stack;
    stack = /** @type {any[]} */ (marks.pop());
    return items;
  };
  const line = () => {
    const end = data.indexOf(10, at);
    if (end < 0) throw new Malformed("UnpicklingError");
    const text = decodeUtf8(data.subarray(at, end));
    at = end + 1;
    return text;
  };
  const text = (/** @type {number} */ length) => decodeUtf8(data.subarray(need(length), at));
  const setItems = (/** @type {any} */ target, /** @type {any[]} */ items) => {
    if (items.length % 2 !== 0) throw new Malformed("UnpicklingError");
    for (let i = 0; i < items.length; i += 2) {
      if (target instanceof Map) target.set(dictKey(items[i]), items[i + 1]);
      else if (!Array.isArray(target)) throw new Malformed("AttributeError");
      else if (!isInt(items[i])) throw new Malformed("TypeError");
      else { // list.__setitem__
        const index = Number(items[i]) < 0 ? Number(items[i]) + target.length : Number(items[i]);
        if (!(index >= 0 && index < target.length)) throw new Malformed("IndexError");
        target[index] = items[i + 1];
      }
    }
  };
  const append = (/** @type {any} */ target, /** @type {any[]} */ items) => {
    if (!Array.isArray(target)) throw new Malformed("AttributeError");
    target.push(...items);
  };
  const memoGet = (/** @type {number} */ index) => {
    if (!memo.has(index)) throw new Malformed("UnpicklingError"); // "Memo value not found at index"
    return memo.get(index);
  };
  const memoPut = (/** @type {number} */ index) => memo.set(index, top());

  for (;;) {
    if (at >= data.length) throw new Malformed("EOFError"); // "Ran out of input"
    const op = data[at++];
    switch (op) {
      case 0x80: { // PROTO
        const proto = data[need(1)];
        if (proto > 5) throw new Malformed("ValueError");
        break;
      }
      case 0x95: need(8); break; // FRAME: the frame's length; the bytes follow as usual
      case 0x2e: return pop(); // STOP
      case 0x28: marks.push(stack); stack = []; break; // MARK
      case 0x30: if (stack.length > 0) stack.pop(); else popMark(); break; // POP
      case 0x31: popMark(); break; // POP_MARK
      case 0x32: stack.push(top()); break; // DUP
      case 0x4e: stack.push(null); break; // NONE
      case 0x88: stack.push(true); break; // NEWTRUE
      case 0x89: stack.push(false); break; // NEWFALSE
      case 0x4a: stack.push(view.getInt32(need(4), true)); break; // BININT
      case 0x4b: stack.push(data[need(1)]); break; // BININT1
      case 0x4d: stack.push(view.getUint16(need(2), true)); break; // BININT2
      case 0x8a: stack.push(longValue(data.subarray(need(data[need(1)]), at))); break; // LONG1
      case 0x8b: { // LONG4
        const length = view.getInt32(need(4), true);
        if (length < 0) throw new Malformed("UnpicklingError");
        stack.push(longValue(data.subarray(need(length), at)));
        break;
      }
      case 0x47: stack.push(new PyFloat(view.getFloat64(need(8), false))); break; // BINFLOAT
      case 0x58: stack.push(text(view.getUint32(need(4), true))); break; // BINUNICODE
      case 0x8c: stack.push(text(data[need(1)])); break; // SHORT_BINUNICODE
      case 0x29: stack.push(new PyTuple([])); break; // EMPTY_TUPLE
      case 0x74: { const items = popMark(); stack.push(new PyTuple(items)); break; } // TUPLE (the mark's stack first)
      case 0x85: stack.push(new PyTuple([pop()])); break; // TUPLE1
      case 0x86: { const b = pop(); const a = pop(); stack.push(new PyTuple([a, b])); break; } // TUPLE2
      case 0x87: { const c = pop(); const b = pop(); const a = pop(); stack.push(new PyTuple([a, b, c])); break; } // TUPLE3
      case 0x5d: stack.push([]); break; // EMPTY_LIST
      case 0x6c: { const items = popMark(); stack.push(items); break; } // LIST
      case 0x61: { const item = pop(); append(top(), [item]); break; } // APPEND
      case 0x65: { const items = popMark(); append(top(), items); break; } // APPENDS
      case 0x7d: stack.push(new Map()); break; // EMPTY_DICT
      case 0x64: { const items = popMark(); const dict = new Map(); setItems(dict, items); stack.push(dict); break; } // DICT
      case 0x73: { const value = pop(); const key = pop(); setItems(top(), [key, value]); break; } // SETITEM
      case 0x75: { const items = popMark(); setItems(top(), items); break; } // SETITEMS
      case 0x63: { const module = line(); const name = line(); stack.push(findClass(module, name)); break; } // GLOBAL
      case 0x93: { // STACK_GLOBAL
        const name = pop();
        const module = pop();
        if (typeof name !== "string" || typeof module !== "string") throw new Malformed("UnpicklingError");
        stack.push(findClass(module, name));
        break;
      }
      case 0x52: { // REDUCE
        const args = pop();
        const callable = pop();
        if (!(callable instanceof Global) || !(args instanceof PyTuple)) throw new Malformed("TypeError");
        stack.push(callable.fn(...args.items));
        break;
      }
      case 0x62: { const state = pop(); top(); build(state); break; } // BUILD (on the instance below the state)
      case 0x51: stack.push(archive.persistentLoad(pop())); break; // BINPERSID
      case 0x71: memoPut(data[need(1)]); break; // BINPUT
      case 0x72: memoPut(view.getUint32(need(4), true)); break; // LONG_BINPUT
      case 0x94: memoPut(memo.size); break; // MEMOIZE
      case 0x68: stack.push(memoGet(data[need(1)])); break; // BINGET
      case 0x6a: stack.push(memoGet(view.getUint32(need(4), true))); break; // LONG_BINGET
      default: throw new Malformed("UnpicklingError"); // "invalid load key"
    }
  }
}

/** A little-endian two's complement integer (LONG1/LONG4). @param {Uint8Array} bytes */
function longValue(bytes) {
  if (bytes.length === 0) return 0;
  let value = 0n;
  for (let i = bytes.length - 1; i >= 0; i--) value = (value << 8n) | BigInt(bytes[i]);
  if (bytes[bytes.length - 1] & 0x80) value -= 1n << BigInt(8 * bytes.length);
  return Number.isSafeInteger(Number(value)) ? Number(value) : value;
}

/**
 * BUILD as the C unpickler runs it on these objects, none of which has a __dict__ or a __setstate__: a no-op
 * for no state, else an error, so a pickle can never change an allowed global for the next file.
 * @param {any} state
 */
function build(state) {
  let slots = null;
  if (state instanceof PyTuple && state.items.length === 2) [state, slots] = state.items;
  if (state !== null) throw new Malformed(state instanceof Map ? "AttributeError" : "UnpicklingError");
  if (slots !== null) {
    if (!(slots instanceof Map)) throw new Malformed("UnpicklingError");
    if (slots.size > 0) throw new Malformed("AttributeError");
  }
}

// --- reading -------------------------------------------------------------------------------------------------------

const ZIP_MAGIC = [0x50, 0x4b, 0x03, 0x04];

/** Whether `data` looks like a torch.save zip (a data.pkl inside), as opposed to our .npz. @param {Uint8Array} data */
export function isPromptFile(data) {
  if (!ZIP_MAGIC.every((b, i) => data[i] === b)) return false;
  let names;
  try {
    names = zipEntries(data).map((entry) => entry.name);
  } catch {
    return includesBytes(data.subarray(0, 4096), "data.pkl"); // a truncated torch file: still ours to refuse with a reason
  }
  return names.some((n) => n === "data.pkl" || n.endsWith("/data.pkl"));
}

/** @param {Uint8Array} data @param {string} ascii */
function includesBytes(data, ascii) {
  const needle = Array.from(ascii, (c) => c.charCodeAt(0));
  outer: for (let i = 0; i + needle.length <= data.length; i++) {
    for (let k = 0; k < needle.length; k++) if (data[i + k] !== needle[k]) continue outer;
    return true;
  }
  return false;
}

/**
 * {codes: Int32Array [8*T], frames, text, rms} from upstream's .pt or wyoming-piper's ref.rvq; PromptFileError
 * naming `name` for anything else.
 * @param {Uint8Array} data @param {string} name
 */
export function readPrompt(data, name) {
  try {
    const archive = new Archive(data);
    let loaded;
    try {
      loaded = unpickle(archive);
    } catch (error) {
      if (error instanceof PromptFileError) throw error;
      if (!(error instanceof Malformed)) throw error;
      refuse(`its pickle is malformed (${error.type})`);
    }
    return promptFields(loaded);
  } catch (error) {
    if (!(error instanceof PromptFileError)) throw error;
    throw new PromptFileError(`voice file ${name} is refused: ${error.message}; save it with upstream's ` +
      "VoiceClonePrompt.save or inference.py --save_voice", error.message);
  }
}

/** The voice in a loaded dict, every field checked as _prompt_fields checks it. @param {any} loaded */
function promptFields(loaded) {
  if (!(loaded instanceof Map)) refuse(`it holds a ${typeName(loaded)}, not the dict of a voice prompt`);
  const missing = ["ref_audio_tokens", "ref_text", "ref_rms"].filter((key) => !loaded.has(key));
  if (missing.length > 0) refuse(`it has no ${missing.join(", ")}, so it is not a voice prompt`);
  const version = loaded.has("format_version") ? loaded.get("format_version") : FORMAT_VERSION; // ref.rvq has none
  if (!isInt(version) || Number(version) !== FORMAT_VERSION) {
    refuse(`its format_version is ${pyRepr(version)}; this reads version ${FORMAT_VERSION}`);
  }
  const tokens = loaded.get("ref_audio_tokens");
  if (!(tokens instanceof Tensor)) refuse(`its ref_audio_tokens is a ${typeName(tokens)}, not a tensor`);
  if (tokens.dtype.kind !== "i" && tokens.dtype.kind !== "u") {
    refuse(`its ref_audio_tokens are ${tokens.dtype.name}; a voice's codes are integers (int64)`);
  }
  const shape = tokens.shape;
  if (shape.length !== 2 || shape[0] !== NUM_CODEBOOKS || !(shape[1] >= 1 && shape[1] <= MAX_FRAMES)) {
    refuse(`its ref_audio_tokens have shape [${shape.join(", ")}]; a voice's are [${NUM_CODEBOOKS}, frames] ` +
      `with 1 to ${MAX_FRAMES} frames`);
  }
  let low = tokens.values[0];
  let high = low;
  for (let i = 1; i < tokens.values.length; i++) {
    const v = tokens.values[i];
    if (v < low) low = v;
    if (v > high) high = v;
  }
  if (low < 0 || high >= CODEBOOK_SIZE) refuse(`its ref_audio_tokens hold ${low}..${high}; codes lie in 0..${CODEBOOK_SIZE - 1}`);
  const text = loaded.get("ref_text");
  if (typeof text !== "string" || strip(text) === "") {
    refuse(`its ref_text is ${typeof text === "string" ? "empty" : "a " + typeName(text)}, not a transcript`);
  }
  const rms = loaded.get("ref_rms");
  const rmsValue = rms instanceof PyFloat ? rms.value : isInt(rms) ? Number(rms) : NaN;
  if (rms !== null && (!Number.isFinite(rmsValue) || rmsValue < 0)) {
    refuse(`its ref_rms is ${pyRepr(rms).slice(0, 40)}; it is the reference's RMS, a finite number >= 0`);
  }
  return { codes: Int32Array.from(tokens.values, Number), frames: shape[1], text, rms: rms === null ? null : rmsValue };
}

// --- writing -------------------------------------------------------------------------------------------------------

/** UTF-8 as Python's "surrogatepass" writes it: a lone surrogate kept, as three bytes. @param {string} text */
export function encodeUtf8(text) {
  const bytes = [];
  for (let i = 0; i < text.length; i++) {
    let code = text.charCodeAt(i);
    if (code >= 0xd800 && code <= 0xdbff && i + 1 < text.length) {
      const low = text.charCodeAt(i + 1);
      if (low >= 0xdc00 && low <= 0xdfff) {
        code = 0x10000 + ((code - 0xd800) << 10) + (low - 0xdc00);
        i++;
      }
    }
    if (code < 0x80) bytes.push(code);
    else if (code < 0x800) bytes.push(0xc0 | (code >> 6), 0x80 | (code & 0x3f));
    else if (code < 0x10000) bytes.push(0xe0 | (code >> 12), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f));
    else bytes.push(0xf0 | (code >> 18), 0x80 | ((code >> 12) & 0x3f), 0x80 | ((code >> 6) & 0x3f), 0x80 | (code & 0x3f));
  }
  return Uint8Array.from(bytes);
}

/** Byte strings joined. @param {(Uint8Array | number[])[]} parts */
export function concatBytes(parts) {
  const out = new Uint8Array(parts.reduce((sum, p) => sum + p.length, 0));
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.length;
  }
  return out;
}

const ascii = (/** @type {string} */ text) => Array.from(text, (c) => c.charCodeAt(0));
const u16 = (/** @type {number} */ v) => [v & 0xff, (v >>> 8) & 0xff];
const u32 = (/** @type {number} */ v) => [v & 0xff, (v >>> 8) & 0xff, (v >>> 16) & 0xff, (v >>> 24) & 0xff];

const op = {
  mark: [0x28], tuple: [0x74], tuple2: [0x86], binpersid: [0x51], newfalse: [0x89], emptyTuple: [0x29],
  reduce: [0x52], none: [0x4e], emptyDict: [0x7d], setitems: [0x75], stop: [0x2e],
};
const pickleGlobal = (/** @type {string} */ module, /** @type {string} */ name) => [0x63, ...ascii(`${module}\n${name}\n`)];
const pickleStr = (/** @type {string} */ value) => {
  const bytes = encodeUtf8(value);
  return concatBytes([[0x58, ...u32(bytes.length)], bytes]);
};
const pickleInt = (/** @type {number} */ value) => {
  if (value >= 0 && value < 256) return [0x4b, value];
  if (value >= 0 && value < 65536) return [0x4d, ...u16(value)];
  return [0x4a, ...u32(value)];
};

/**
 * The bytes of upstream's VoiceClonePrompt.save for these fields (prompt_file.py prompt_bytes): the same bytes.
 * rms null (a synthesized reference, which sets no loudness) is saved as None.
 * @param {Int32Array | BigInt64Array | ArrayLike<number>} codes [8 * frames], row-major
 * @param {number} frames @param {string} text @param {number | null} rms
 */
export function promptBytes(codes, frames, text, rms) {
  if (codes.length !== NUM_CODEBOOKS * frames || !(frames >= 1 && frames <= MAX_FRAMES)) {
    const shape = frames >= 0 && codes.length === NUM_CODEBOOKS * frames ? `[${NUM_CODEBOOKS}, ${frames}]` : `[${codes.length}]`;
    throw new UserError(`a voice's codes are [${NUM_CODEBOOKS}, 1..${MAX_FRAMES}], got ${shape}`);
  }
  const tensor = concatBytes([
    pickleGlobal("torch._utils", "_rebuild_tensor_v2"), op.mark,
    op.mark, pickleStr("storage"), pickleGlobal("torch", "LongStorage"), pickleStr("0"), pickleStr("cpu"),
    pickleInt(codes.length), op.tuple, op.binpersid,
    pickleInt(0), pickleInt(NUM_CODEBOOKS), pickleInt(frames), op.tuple2, pickleInt(frames), pickleInt(1), op.tuple2,
    op.newfalse, pickleGlobal("collections", "OrderedDict"), op.emptyTuple, op.reduce,
    op.tuple, op.reduce,
  ]);
  const rmsOp = rms === null ? op.none : (() => {
    const bytes = new Uint8Array(9);
    bytes[0] = 0x47;
    new DataView(bytes.buffer).setFloat64(1, rms, false);
    return bytes;
  })();
  const pickled = concatBytes([
    [0x80, 0x02], op.emptyDict, op.mark,
    pickleStr("format_version"), pickleInt(FORMAT_VERSION),
    pickleStr("ref_audio_tokens"), tensor,
    pickleStr("ref_text"), pickleStr(text),
    pickleStr("ref_rms"), rmsOp,
    op.setitems, op.stop,
  ]);
  const storage = new Uint8Array(codes.length * 8);
  const view = new DataView(storage.buffer);
  for (let i = 0; i < codes.length; i++) view.setBigInt64(i * 8, BigInt(codes[i]), true);
  /** @type {[string, Uint8Array][]} */
  const members = [["data.pkl", pickled], [".format_version", Uint8Array.of(0x31)],
    [".storage_alignment", Uint8Array.from(ascii(String(ALIGNMENT)))], ["byteorder", Uint8Array.from(ascii("little"))],
    ["data/0", storage], ["version", Uint8Array.from(ascii("3\n"))]];
  return storedZip(members.map(([n, d]) => [`archive/${n}`, d]), ALIGNMENT);
}

/**
 * A zip of stored members laid out as Python's zipfile writes one with writestr (dated 1980-01-01); `align`:
 * each member's data starts on that boundary, padded by an "FB" extra field as torch writes it.
 * @param {[string, Uint8Array][]} members @param {number} [align]
 */
export function storedZip(members, align = 0) {
  /** @type {Uint8Array[]} */
  const parts = [];
  /** @type {Uint8Array[]} */
  const central = [];
  let at = 0;
  const dosDate = (0 << 9) | (1 << 5) | 1;
  for (const [name, data] of members) {
    const nameBytes = encodeUtf8(name);
    const flags = /^[\x00-\x7f]*$/.test(name) ? 0 : UTF8_NAME;
    let extra = new Uint8Array(0);
    if (align) {
      const padding = (((-(at + 30 + nameBytes.length + 4)) % align) + align) % align;
      extra = concatBytes([[0x46, 0x42, ...u16(padding)], new Uint8Array(padding)]);
    }
    const crc = crc32(data);
    const fields = [...u16(0), ...u16(dosDate), ...u32(crc), ...u32(data.length), ...u32(data.length),
      ...u16(nameBytes.length), ...u16(extra.length)];
    const header = concatBytes([u32(LOCAL), [20, 0], u16(flags), u16(0), fields, nameBytes, extra]);
    // Made on Unix (3), version 2.0; the file's mode rw------- (what writestr gives a member without one).
    central.push(concatBytes([u32(CENTRAL), [20, 3, 20, 0], u16(flags), u16(0), fields, u16(0), u16(0), u16(0),
      u32(0o600 << 16), u32(at), nameBytes, extra]));
    parts.push(header, data);
    at += header.length + data.length;
  }
  const directory = concatBytes(central);
  const end = concatBytes([u32(END), u16(0), u16(0), u16(members.length), u16(members.length), u32(directory.length),
    u32(at), u16(0)]);
  return concatBytes([...parts, directory, end]);
}
