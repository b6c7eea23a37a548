/**
 * Our own voice files (.npz): the port of codes/runtime/voices/voice.py Voice.to_bytes("npz") and of
 * prompt_file.py read_npz. The file is numpy.savez's zip of four .npy members: codes int64 [8, T], text (a
 * numpy unicode scalar), rms float64 (NaN for none) and format_version. np.load would allocate whatever shape a
 * member's header claims before reading it, so each member is read within its cap and its header held to the
 * bytes that follow it, with the Python side's messages.
 */
import { UserError } from "../errors.mjs";
import { MAX_ELEMENTS, MAX_PICKLE_BYTES, NUM_CODEBOOKS, PromptFileError, Zip, firstLine, refuse, storedZip } from "./prompt_file.mjs";
import { NpyError, npyHeader, npyValues, readNpyHeader } from "../audio/npy.mjs";

export const VOICE_FORMAT_VERSION = 1;

/** Each member and the most bytes it may hold. */
export const NPZ_CAPS = Object.freeze({
  "codes.npy": 4096 + MAX_ELEMENTS * 8,
  "text.npy": 4096 + MAX_PICKLE_BYTES * 4,
  "rms.npy": 4096,
  "format_version.npy": 4096,
});

/**
 * One member as read_npz gives it: its dtype, its shape, and its values (a typed array in C order; a unicode
 * scalar's code points as a Uint32Array).
 * @typedef {{dtype: import("../audio/npy.mjs").NpyDType, shape: number[], values: any}} NpzArray
 */

/**
 * The arrays of our .npz voice file (codes, text, rms, format_version), never an object array; PromptFileError
 * naming `name` for anything else.
 * @param {Uint8Array} data @param {string} name
 * @returns {Record<"codes" | "text" | "rms" | "format_version", NpzArray>}
 */
export function readNpz(data, name) {
  try {
    const archive = new Zip(data);
    /** @type {Record<string, NpzArray>} */
    const arrays = {};
    for (const [member, most] of Object.entries(NPZ_CAPS)) {
      const raw = archive.read(member, most);
      let header;
      try {
        header = readNpyHeader(raw);
      } catch (error) {
        if (!(error instanceof NpyError)) throw error;
        refuse(`its member ${member} is not a numpy array (${firstLine(error)})`);
      }
      if (header.dtype.hasObject) refuse(`its member ${member} holds Python objects, which a voice never does`);
      const count = header.shape.reduce((p, n) => p * n, 1);
      const follows = raw.length - header.dataStart;
      if (count * header.dtype.itemsize !== follows) {
        refuse(`its member ${member} claims shape [${header.shape.slice(0, 4).join(", ")}] but holds ${follows} bytes`);
      }
      arrays[member.slice(0, -".npy".length)] = { dtype: header.dtype, shape: header.shape, values: memberValues(raw, header) };
    }
    return /** @type {any} */ (arrays);
  } catch (error) {
    if (!(error instanceof PromptFileError)) throw error;
    throw new PromptFileError(`cannot read voice file ${name} (${error.message}); save one with --save_voice`, error.message);
  }
}

/**
 * A member's values: numbers as npyValues reads them, a unicode array's code points (UTF-32).
 * @param {Uint8Array} raw @param {ReturnType<typeof readNpyHeader>} header
 */
function memberValues(raw, header) {
  if (header.dtype.kind !== "U") return npyValues(raw, header);
  const count = (raw.length - header.dataStart) / 4;
  const view = new DataView(raw.buffer, raw.byteOffset + header.dataStart, count * 4);
  const points = new Uint32Array(count);
  for (let i = 0; i < count; i++) points[i] = view.getUint32(i * 4, header.dtype.littleEndian);
  return points;
}

/**
 * str() of a numpy unicode scalar: its code points, trailing NULs dropped as numpy drops them; null for a code
 * point no string holds.
 * @param {Uint32Array} points
 */
export function unicodeScalar(points) {
  let end = points.length;
  while (end > 0 && points[end - 1] === 0) end--;
  let text = "";
  for (let i = 0; i < end; i++) {
    if (points[i] > 0x10ffff) return null;
    text += String.fromCodePoint(points[i]);
  }
  return text;
}

/**
 * A .npy member of a unicode scalar, as numpy writes np.array(text): '<U{n}' with n its code points (at least 1).
 * @param {string} text
 */
function unicodeNpy(text) {
  const points = Array.from(text, (c) => /** @type {number} */ (c.codePointAt(0)));
  const width = Math.max(points.length, 1);
  const header = npyHeader(`<U${width}`, []);
  const out = new Uint8Array(header.length + 4 * width);
  out.set(header);
  const view = new DataView(out.buffer, header.length);
  points.forEach((code, i) => view.setUint32(i * 4, code, true));
  return out;
}

/** A 0-d .npy member of one number. @param {"<f8" | "<i8"} descr @param {number} value */
function scalarNpy(descr, value) {
  const header = npyHeader(descr, []);
  const out = new Uint8Array(header.length + 8);
  out.set(header);
  const view = new DataView(out.buffer, header.length);
  if (descr === "<f8") view.setFloat64(0, value, true);
  else view.setBigInt64(0, BigInt(value), true);
  return out;
}

/**
 * The bytes of our .npz voice file (Voice.to_bytes("npz")): what np.load and Voice.load read back.
 * @param {Int32Array | BigInt64Array | ArrayLike<number>} codes [8 * frames] @param {number} frames
 * @param {string} text @param {number | null} rms
 */
export function npzBytes(codes, frames, text, rms) {
  if (!(Number.isInteger(frames) && frames >= 0 && codes.length === NUM_CODEBOOKS * frames)) {
    throw new UserError(`a voice's codes are [${NUM_CODEBOOKS}, frames]: ${codes.length} values for ${frames} frames`);
  }
  const header = npyHeader("<i8", [NUM_CODEBOOKS, frames]);
  const codesNpy = new Uint8Array(header.length + codes.length * 8);
  codesNpy.set(header);
  const view = new DataView(codesNpy.buffer, header.length);
  for (let i = 0; i < codes.length; i++) view.setBigInt64(i * 8, BigInt(codes[i]), true);
  return storedZip([
    ["codes.npy", codesNpy],
    ["text.npy", unicodeNpy(text)],
    ["rms.npy", scalarNpy("<f8", rms === null ? NaN : rms)],
    ["format_version.npy", scalarNpy("<i8", VOICE_FORMAT_VERSION)],
  ]);
}
