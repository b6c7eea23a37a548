/**
 * Hand-made torch.save files for the voice tests: a protocol-2 pickle spelled opcode by opcode, packed in the
 * zip torch writes, so a test can make every hostile variant (another global, a storage that lies, a tensor
 * past its storage, a wrong field) without torch. Also: a zip with one member replaced.
 */
import { Zip, concatBytes, encodeUtf8, storedZip, zipEntries } from "../../src/voices/prompt_file.mjs";

const u32 = (/** @type {number} */ v) => [v & 0xff, (v >>> 8) & 0xff, (v >>> 16) & 0xff, (v >>> 24) & 0xff];

/** The opcodes the tests spell pickles with. */
export const OP = {
  proto2: [0x80, 2], mark: [0x28], stop: [0x2e], tuple: [0x74], tuple2: [0x86], emptyTuple: [0x29], reduce: [0x52],
  binpersid: [0x51], newfalse: [0x89], newtrue: [0x88], none: [0x4e], emptyDict: [0x7d], emptyList: [0x5d],
  setitems: [0x75], append: [0x61], build: [0x62], pop: [0x30],
};

/** @param {string} value */
export const str = (value) => { const b = encodeUtf8(value); return [0x58, ...u32(b.length), ...b]; };
/** @param {number} value */
export const int = (value) => (value >= 0 && value < 256 ? [0x4b, value]
  : value >= 0 && value < 65536 ? [0x4d, value & 0xff, value >> 8] : [0x4a, ...u32(value)]);
/** @param {number} value */
export const float = (value) => {
  const b = new Uint8Array(9);
  b[0] = 0x47;
  new DataView(b.buffer).setFloat64(1, value, false);
  return [...b];
};
/** @param {string} module @param {string} name */
export const global = (module, name) => [0x63, ...Array.from(`${module}\n${name}\n`, (c) => c.charCodeAt(0))];

/**
 * A tensor's opcodes: _rebuild_tensor_v2((storage, type, key, "cpu", numel), offset, shape, stride, False, OrderedDict()).
 * @param {{storage?: string, key?: string, numel: number, shape: number[], stride?: number[], offset?: number, hooks?: number[]}} t
 */
export function tensor({ storage = "LongStorage", key = "0", numel, shape, stride, offset = 0, hooks }) {
  const strides = stride ?? shape.map((_, i) => shape.slice(i + 1).reduce((p, n) => p * n, 1));
  const tuple = (/** @type {number[]} */ items) => [...OP.mark, ...items.flatMap(int), ...OP.tuple];
  return [
    ...global("torch._utils", "_rebuild_tensor_v2"), ...OP.mark,
    ...OP.mark, ...str("storage"), ...global("torch", storage), ...str(key), ...str("cpu"), ...int(numel), ...OP.tuple,
    ...OP.binpersid, ...int(offset), ...tuple(shape), ...tuple(strides), ...OP.newfalse,
    ...(hooks ?? [...global("collections", "OrderedDict"), ...OP.emptyTuple, ...OP.reduce]),
    ...OP.tuple, ...OP.reduce,
  ];
}

/**
 * A pickled dict of these (key, value-opcodes) pairs.
 * @param {[string, number[]][]} items
 */
export function dict(items) {
  return Uint8Array.from([...OP.proto2, ...OP.emptyDict, ...OP.mark, ...items.flatMap(([k, v]) => [...str(k), ...v]),
    ...OP.setitems, ...OP.stop]);
}

/** Little-endian int64 bytes of these values. @param {ArrayLike<number>} values */
export function int64Bytes(values) {
  const out = new Uint8Array(values.length * 8);
  const view = new DataView(out.buffer);
  for (let i = 0; i < values.length; i++) view.setBigInt64(i * 8, BigInt(values[i]), true);
  return out;
}

/**
 * A torch.save-like zip: archive/data.pkl, archive/data/<key> for each storage, archive/byteorder.
 * @param {Uint8Array} pickle @param {Record<string, Uint8Array>} storages @param {string} [byteorder]
 */
export function ptFile(pickle, storages, byteorder = "little") {
  /** @type {[string, Uint8Array][]} */
  const members = [["archive/data.pkl", pickle], ["archive/byteorder", encodeUtf8(byteorder)]];
  for (const [key, bytes] of Object.entries(storages)) members.push([`archive/data/${key}`, bytes]);
  members.push(["archive/version", encodeUtf8("3\n")]);
  return storedZip(members, 64);
}

/**
 * The same zip with one member's bytes replaced (the rest copied as they are).
 * @param {Uint8Array} zip @param {string} suffix the member whose name ends so @param {Uint8Array} bytes
 */
export function withMember(zip, suffix, bytes) {
  const archive = new Zip(zip);
  return storedZip(zipEntries(zip).map((entry) =>
    /** @type {[string, Uint8Array]} */ ([entry.name, entry.name.endsWith(suffix) ? bytes : archive.read(entry.name, entry.size)])));
}

/** A member's bytes. @param {Uint8Array} zip @param {string} suffix */
export function memberOf(zip, suffix) {
  const entry = zipEntries(zip).find((e) => e.name.endsWith(suffix));
  if (!entry) throw new Error(`no member ${suffix}`);
  return new Zip(zip).read(entry.name, entry.size);
}

/** Byte strings joined. */
export { concatBytes };
