/**
 * A voice: a reusable clone prompt (upstream's VoiceClonePrompt: reference codes, their transcript, the clip's
 * loudness), and its files: ours (.npz), upstream's .pt and wyoming-piper's ref.rvq, told apart by content. The
 * port of codes/runtime/voices/voice.py (docs/runtime.md, "Reference clips").
 */
import { UserError } from "../errors.mjs";
import { readBytes } from "../files.mjs";
import { CODEBOOK_SIZE, MAX_FILE_BYTES, NUM_CODEBOOKS, isPromptFile, promptBytes, readPrompt } from "./prompt_file.mjs";
import { VOICE_FORMAT_VERSION, npzBytes, readNpz, unicodeScalar } from "./npz.mjs";

export { VOICE_FORMAT_VERSION };

// What Python's OSError.strerror says for the codes Node reports, so both sides word a missing file alike.
const STRERROR = {
  ENOENT: "No such file or directory", EACCES: "Permission denied", EISDIR: "Is a directory",
  ENOTDIR: "Not a directory", EPERM: "Operation not permitted", ELOOP: "Too many levels of symbolic links",
};

export class Voice {
  /**
   * @param {Int32Array} codes [8 * frames], row-major (codebook by codebook), values 0..1023
   * @param {number} frames
   * @param {string} text the transcript
   * @param {number | null} rms the clip's RMS; null: a synthesized reference, which sets no loudness
   */
  constructor(codes, frames, text, rms) {
    this.codes = codes;
    this.frames = frames;
    this.text = text;
    this.rms = rms;
  }

  /**
   * The file's bytes: "npz", ours, or "pt", upstream's VoiceClonePrompt.save (torch.load and upstream read it).
   * @param {"npz" | "pt"} [kind]
   */
  toBytes(kind = "npz") {
    if (kind === "pt") return promptBytes(this.codes, this.frames, this.text, this.rms);
    if (kind !== "npz") throw new UserError(`a voice is saved as "npz" or "pt", not ${JSON.stringify(kind)}`);
    return npzBytes(this.codes, this.frames, this.text, this.rms);
  }

  /**
   * A voice file's bytes: ours, upstream's .pt or wyoming-piper's ref.rvq, told apart by content; `name` is what
   * an error calls it.
   * @param {Uint8Array | ArrayBuffer} bytes @param {string} name
   */
  static fromBytes(bytes, name) {
    const data = bytes instanceof Uint8Array ? bytes : new Uint8Array(bytes);
    if (isPromptFile(data)) {
      const { codes, frames, text, rms } = readPrompt(data, name);
      return new Voice(codes, frames, text, rms);
    }
    const arrays = readNpz(data, name);
    const { format_version: version, text, rms } = arrays;
    const kind = (/** @type {{dtype: {kind: string}}} */ a) => a.dtype.kind;
    if (version.shape.length !== 0 || !"iu".includes(kind(version)) || Number(version.values[0]) !== VOICE_FORMAT_VERSION) {
      throw new UserError(`${name} is a voice file of another format version; save it again with --save_voice`);
    }
    const transcript = kind(text) === "U" && text.shape.length === 0 ? unicodeScalar(text.values) : null;
    const level = kind(rms) === "f" && rms.shape.length === 0 ? floatValue(rms) : null;
    if (transcript === null || level === null) {
      throw new UserError(`cannot read voice file ${name}: its text or rms is not a voice's; save one with --save_voice`);
    }
    const codes = checkRefCodes(arrays.codes, name);
    return new Voice(codes, arrays.codes.shape[1], transcript, Number.isNaN(level) ? null : level);
  }

  /**
   * A voice file from a path (Node) or a URL.
   * @param {string} location
   */
  static async load(location) {
    let bytes;
    try {
      bytes = await readBytes(location);
    } catch (error) {
      if (!(error instanceof UserError)) throw error;
      const code = /: (E[A-Z]+)$/.exec(error.message)?.[1];
      const reason = code ? (/** @type {Record<string, string>} */ (STRERROR)[code] ?? code) : error.message;
      throw new UserError(`cannot read voice file ${location} (${reason}); save one with --save_voice`);
    }
    // Python reads no more than one byte past the cap, so a larger file is refused by the same count.
    return Voice.fromBytes(bytes.subarray(0, MAX_FILE_BYTES + 1), location);
  }
}

/** A 0-d float member's value (float16's bits decoded), or null for one JS cannot hold. @param {any} array */
function floatValue(array) {
  if (array.values === null) return null;
  const value = array.values[0];
  return array.dtype.itemsize === 2 ? halfToFloat(value) : Number(value);
}

/** An IEEE half's bits as a number. @param {number} bits */
function halfToFloat(bits) {
  const sign = bits & 0x8000 ? -1 : 1;
  const exponent = (bits >> 10) & 0x1f;
  const fraction = bits & 0x3ff;
  if (exponent === 0) return sign * fraction * 2 ** -24;
  if (exponent === 0x1f) return fraction ? NaN : sign * Infinity;
  return sign * (1 + fraction / 1024) * 2 ** (exponent - 15);
}

/**
 * voices/prompt.py check_ref_codes on an .npz's codes: int [8, frames >= 1] in [0, 1024), as an Int32Array.
 * @param {import("./npz.mjs").NpzArray} array @param {string} name
 */
function checkRefCodes(array, name) {
  const { shape, values, dtype } = array;
  if (shape.length !== 2 || shape[0] !== NUM_CODEBOOKS || shape[1] === 0) {
    throw new UserError(`cannot read voice file ${name}: reference codes must have shape [${NUM_CODEBOOKS}, frames >= 1], ` +
      `got [${shape.join(", ")}]`);
  }
  let inRange = (dtype.kind === "i" || dtype.kind === "u") && values !== null;
  for (let i = 0; inRange && i < values.length; i++) inRange = values[i] >= 0 && values[i] < CODEBOOK_SIZE;
  if (!inRange) {
    throw new UserError(`cannot read voice file ${name}: reference codes must be integers in [0, ${CODEBOOK_SIZE}); ` +
      "the voice prompt is damaged");
  }
  return Int32Array.from(values, Number);
}
