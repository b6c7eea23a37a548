/**
 * numpy's .npy files: written as numpy.save writes them (byte for byte: the same header and padding) and read
 * within bounds, never an object array. The port of codes/runtime/audio/outputs.py save_codes/load_codes
 * (inference.py --codes_out: int64 [8, T]) and of the .npy half of prompt_file.py read_npz (np.lib.format's
 * header rules and messages).
 */
import { UserError } from "../errors.mjs";
import { reprString } from "../text/python.mjs";
import { bytesRepr } from "../voices/prompt_file.mjs";

const MAGIC = [0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59]; // \x93NUMPY
const ARRAY_ALIGN = 64;
const GROWTH_AXIS_MAX_DIGITS = 21;
const MAX_HEADER_SIZE = 10000; // np.lib.format's _MAX_HEADER_SIZE

/**
 * A dtype as a .npy header's descr names it: {descr, kind, itemsize, littleEndian, hasObject}.
 * @typedef {{descr: string, kind: string, itemsize: number, littleEndian: boolean, hasObject: boolean}} NpyDType
 */

/** A header problem, as np.lib.format raises it (a ValueError): the message is numpy's. */
export class NpyError extends Error {}

// --- the header's Python literal ---------------------------------------------------------------------------------

/**
 * ast.literal_eval of the few forms a .npy header holds: a dict of strings, True/False, ints and tuples (and
 * lists, for structured descrs). Tuples come back as {tuple: [...]}.
 * @param {string} text
 */
function literal(text) {
  let at = 0;
  /** @returns {never} */
  const fail = () => {
    throw new NpyError(`Cannot parse header: ${reprString(text)}`);
  };
  const space = () => {
    while (at < text.length && " \t\n\r\f\v".includes(text[at])) at++;
  };
  /** @returns {any} */
  const value = () => {
    space();
    const c = text[at];
    if (c === "'" || c === '"') {
      const end = text.indexOf(c, at + 1);
      if (end < 0) fail();
      const body = text.slice(at + 1, end);
      if (body.includes("\\")) fail(); // a descr or key never escapes anything
      at = end + 1;
      return body;
    }
    if (c === "{" || c === "(" || c === "[") {
      const close = { "{": "}", "(": ")", "[": "]" }[c];
      at++;
      const items = [];
      let trailingComma = false;
      for (;;) {
        space();
        if (text[at] === close) {
          at++;
          break;
        }
        const item = value();
        if (c === "{") {
          space();
          if (text[at] !== ":") fail();
          at++;
          items.push([item, value()]);
        } else items.push(item);
        space();
        trailingComma = text[at] === ",";
        if (trailingComma) at++;
        else if (text[at] !== close) fail();
      }
      if (c === "{") {
        const dict = new Map();
        for (const [k, v] of items) {
          if (typeof k !== "string") fail();
          dict.set(k, v);
        }
        return dict;
      }
      if (c === "(") return items.length === 1 && !trailingComma ? items[0] : { tuple: items };
      return items;
    }
    const word = /^(True|False|None|[+-]?\d+L?)/.exec(text.slice(at));
    if (!word) fail();
    at += word[0].length;
    if (word[0] === "True") return true;
    if (word[0] === "False") return false;
    if (word[0] === "None") return null;
    return Number(word[0].replace(/L$/, ""));
  };
  const result = value();
  space();
  if (at !== text.length) fail();
  return result;
}

/** Python's repr() of a parsed header value, for numpy's messages. @param {any} v @returns {string} */
function show(v) {
  if (typeof v === "string") return reprString(v);
  if (v === true) return "True";
  if (v === false) return "False";
  if (v === null) return "None";
  if (v instanceof Map) return `{${[...v].map(([k, x]) => `${show(k)}: ${show(x)}`).join(", ")}}`;
  if (Array.isArray(v)) return `[${v.map(show).join(", ")}]`;
  if (v && Array.isArray(v.tuple)) return v.tuple.length === 1 ? `(${show(v.tuple[0])},)` : `(${v.tuple.map(show).join(", ")})`;
  return String(v);
}

const KIND_SIZES = { b: [1], i: [1, 2, 4, 8], u: [1, 2, 4, 8], f: [2, 4, 8, 16], c: [8, 16, 32] };

/**
 * np.dtype(descr) for a typestr ('<i8', '|b1', '<U5', '|O', ...): its kind, item size and byte order.
 * @param {any} descr
 * @returns {NpyDType}
 */
export function parseDescr(descr) {
  const invalid = () => new NpyError(`descr is not a valid dtype descriptor: ${show(descr)}`);
  if (typeof descr !== "string") throw invalid();
  const match = /^([<>|=]?)([biufcUSaOV?])(\d*)$/.exec(descr);
  if (!match) throw invalid();
  const [, order, rawKind, digits] = match;
  const kind = rawKind === "?" ? "b" : rawKind === "a" ? "S" : rawKind;
  let itemsize;
  if (kind === "O") itemsize = 8;
  else if (kind === "U") itemsize = 4 * Number(digits || 0);
  else if (kind === "S" || kind === "V") itemsize = Number(digits || 0);
  else {
    itemsize = digits === "" ? (kind === "b" ? 1 : NaN) : Number(digits);
    if (!(/** @type {Record<string, number[]>} */ (KIND_SIZES)[kind] ?? []).includes(itemsize)) throw invalid();
  }
  if (kind === "O" && digits !== "" && digits !== "8") throw invalid();
  return { descr, kind, itemsize, littleEndian: order !== ">", hasObject: kind === "O" };
}

/**
 * A .npy file's header, checked as np.lib.format.read_magic and read_array_header_* check it: the dtype, the
 * shape, the order and where the data starts. NpyError (numpy's message) for anything else.
 * @param {Uint8Array} bytes
 * @returns {{dtype: NpyDType, shape: number[], fortranOrder: boolean, dataStart: number}}
 */
export function readNpyHeader(bytes) {
  if (bytes.length < 8) throw new NpyError(`EOF: reading magic string, expected 8 bytes got ${bytes.length}`);
  if (!MAGIC.every((b, i) => bytes[i] === b)) {
    throw new NpyError(`the magic string is not correct; expected b'\\x93NUMPY', got ${bytesRepr(bytes.subarray(0, 6))}`);
  }
  const major = bytes[6];
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const lengthSize = major === 1 ? 2 : 4;
  if (bytes.length < 8 + lengthSize) {
    throw new NpyError(`EOF: reading array header length, expected ${lengthSize} bytes got ${bytes.length - 8}`);
  }
  const length = major === 1 ? view.getUint16(8, true) : view.getUint32(8, true);
  const start = 8 + lengthSize;
  if (bytes.length < start + length) {
    throw new NpyError(`EOF: reading array header, expected ${length} bytes got ${bytes.length - start}`);
  }
  const raw = bytes.subarray(start, start + length);
  const text = major >= 3 ? new TextDecoder().decode(raw) : String.fromCharCode(...raw);
  if (length > MAX_HEADER_SIZE) {
    throw new NpyError(`Header info length (${length}) is large and may not be safe to load securely.`);
  }
  const header = literal(text);
  if (!(header instanceof Map)) throw new NpyError(`Header is not a dictionary: ${show(header)}`);
  const keys = [...header.keys()].sort();
  if (keys.join() !== "descr,fortran_order,shape") {
    throw new NpyError(`Header does not contain the correct keys: ${show(keys)}`);
  }
  const shape = header.get("shape");
  if (!(shape && Array.isArray(shape.tuple) && shape.tuple.every((/** @type {any} */ n) => typeof n === "number"))) {
    throw new NpyError(`shape is not valid: ${show(shape)}`);
  }
  const fortranOrder = header.get("fortran_order");
  if (typeof fortranOrder !== "boolean") throw new NpyError(`fortran_order is not a valid bool: ${show(fortranOrder)}`);
  return { dtype: parseDescr(header.get("descr")), shape: shape.tuple, fortranOrder, dataStart: start + length };
}

// --- the elements --------------------------------------------------------------------------------------------------

/**
 * A .npy file's numbers in C order as a typed array: int64/uint64 as BigInt64Array/BigUint64Array, bool as
 * Uint8Array, float16 as its bits (Uint16Array). Strings and objects are not numbers (null).
 * @param {Uint8Array} bytes @param {{dtype: NpyDType, shape: number[], fortranOrder: boolean, dataStart: number}} header
 */
export function npyValues(bytes, header) {
  const { dtype, shape, fortranOrder, dataStart } = header;
  const count = shape.reduce((p, n) => p * n, 1);
  const make = {
    i1: Int8Array, i2: Int16Array, i4: Int32Array, i8: BigInt64Array, u1: Uint8Array, u2: Uint16Array,
    u4: Uint32Array, u8: BigUint64Array, f4: Float32Array, f8: Float64Array, b1: Uint8Array, f2: Uint16Array,
  }[dtype.kind + dtype.itemsize];
  if (make === undefined) return null;
  const out = new make(count);
  const view = new DataView(bytes.buffer, bytes.byteOffset + dataStart, count * dtype.itemsize);
  const little = dtype.littleEndian;
  const get = /** @type {(at: number) => any} */ ({
    i1: (at) => view.getInt8(at), i2: (at) => view.getInt16(at, little), i4: (at) => view.getInt32(at, little),
    i8: (at) => view.getBigInt64(at, little), u1: (at) => view.getUint8(at), u2: (at) => view.getUint16(at, little),
    u4: (at) => view.getUint32(at, little), u8: (at) => view.getBigUint64(at, little),
    f4: (at) => view.getFloat32(at, little), f8: (at) => view.getFloat64(at, little), b1: (at) => view.getUint8(at),
    f2: (at) => view.getUint16(at, little),
  }[dtype.kind + dtype.itemsize]);
  if (!fortranOrder || shape.length < 2) {
    for (let i = 0; i < count; i++) /** @type {any} */ (out)[i] = get(i * dtype.itemsize);
    return out;
  }
  // Fortran order: element (i0, i1, ...) sits at i0 + n0 * (i1 + n1 * ...); written out in C order.
  const index = new Array(shape.length).fill(0);
  for (let k = 0; k < count; k++) {
    let at = 0;
    for (let d = shape.length - 1; d >= 0; d--) at = at * shape[d] + index[d];
    /** @type {any} */ (out)[k] = get(at * dtype.itemsize);
    for (let d = shape.length - 1; d >= 0; d--) {
      if (++index[d] < shape[d]) break;
      index[d] = 0;
    }
  }
  return out;
}

/**
 * A .npy file (numpy.save's, or --codes_out's int64 [8, T]): {data, shape, dtype (its descr)}, data a typed
 * array in C order. UserError naming `name` for anything that is not one.
 * @param {Uint8Array} bytes @param {string} [name]
 */
export function readNpy(bytes, name = "the .npy file") {
  const fix = "it must be a .npy array written by numpy.save";
  if (!MAGIC.every((b, i) => bytes[i] === b)) throw new UserError(`codes file ${name} is not a .npy file; write codes with numpy.save or --codes_out`);
  let header;
  try {
    header = readNpyHeader(bytes);
  } catch (error) {
    if (!(error instanceof NpyError)) throw error;
    throw new UserError(`cannot read codes file ${name}: ${error.message}; ${fix}`);
  }
  const count = header.shape.reduce((p, n) => p * n, 1);
  if (header.dtype.hasObject) throw new UserError(`cannot read codes file ${name}: it holds Python objects; ${fix}`);
  if (count < 0 || count * header.dtype.itemsize !== bytes.length - header.dataStart) {
    throw new UserError(`cannot read codes file ${name}: its header claims shape [${header.shape.join(", ")}] but ` +
      `${bytes.length - header.dataStart} bytes follow; ${fix}`);
  }
  const data = npyValues(bytes, header);
  if (data === null) throw new UserError(`cannot read codes file ${name}: its dtype ${header.dtype.descr} is not a number type; ${fix}`);
  return { data, shape: header.shape, dtype: header.dtype.descr };
}

// --- writing -------------------------------------------------------------------------------------------------------

/**
 * The header numpy.save writes for this descr and shape (format version 1.0, padded to 64 bytes, with room for the
 * first axis to grow).
 * @param {string} descr @param {number[]} shape
 */
export function npyHeader(descr, shape) {
  const shapeText = shape.length === 1 ? `(${shape[0]},)` : `(${shape.join(", ")})`;
  let header = `{'descr': '${descr}', 'fortran_order': False, 'shape': ${shapeText}, }`;
  if (shape.length > 0) header += " ".repeat(GROWTH_AXIS_MAX_DIGITS - String(shape[0]).length);
  const length = header.length + 1;
  const padding = ARRAY_ALIGN - ((MAGIC.length + 2 + 2 + length) % ARRAY_ALIGN);
  const total = length + padding;
  const out = new Uint8Array(10 + total);
  out.set(MAGIC);
  out[6] = 1;
  out[7] = 0;
  out[8] = total & 0xff;
  out[9] = total >> 8;
  for (let i = 0; i < header.length; i++) out[10 + i] = header.charCodeAt(i);
  out.fill(0x20, 10 + header.length, 10 + total - 1);
  out[10 + total - 1] = 0x0a;
  return out;
}

/**
 * A .npy file as numpy.save writes it: int64 ('<i8') from a BigInt64Array or an Int32Array (`dtype` "int64", the
 * default for those), float32 ('<f4') from a Float32Array.
 * @param {BigInt64Array | Int32Array | Float32Array} values C order
 * @param {number[]} shape
 * @param {"int64" | "float32"} [dtype]
 */
export function writeNpy(values, shape, dtype = values instanceof Float32Array ? "float32" : "int64") {
  const count = shape.reduce((p, n) => p * n, 1);
  if (!shape.every((n) => Number.isInteger(n) && n >= 0) || count !== values.length) {
    throw new UserError(`cannot write a .npy of shape [${shape.join(", ")}] from ${values.length} values`);
  }
  const itemsize = dtype === "int64" ? 8 : 4;
  const header = npyHeader(dtype === "int64" ? "<i8" : "<f4", shape);
  const out = new Uint8Array(header.length + count * itemsize);
  out.set(header);
  const view = new DataView(out.buffer, header.length);
  if (dtype === "int64") {
    for (let i = 0; i < count; i++) view.setBigInt64(i * 8, BigInt(values[i]), true);
  } else {
    for (let i = 0; i < count; i++) view.setFloat32(i * 4, Number(values[i]), true);
  }
  return out;
}
