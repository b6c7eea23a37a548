/**
 * WAV files in and out, as the Python runtime's soundfile (libsndfile) reads and writes them: the port of
 * codes/runtime/audio/processing.py read_audio (for WAV; a reference clip, docs/runtime.md "Reference clips") and
 * codes/runtime/audio/outputs.py write_audio (16-bit PCM).
 *
 * Reading gives libsndfile's float32 samples exactly: PCM scaled by 1/2^(bits-1) (8-bit WAV is unsigned, centred
 * on 128), float32 as is, float64 rounded to float32. Writing quantizes as libsndfile does with the clipping
 * soundfile turns on: a sample times 2^31 in float32, clipped at +-2^31, rounded half to even, its top 16 bits
 * kept (so +1 gives 32767, -1 gives -32768, and NaN -32768), under the same 44-byte header.
 */
import { UserError } from "../errors.mjs";

const FORMATS = "Node reads WAV: PCM 8, 16, 24 or 32-bit, or float 32 or 64-bit (convert other files to WAV first)";
const PCM = 1;
const FLOAT = 3;
const EXTENSIBLE = 0xfffe;
// The tail every WAVE_FORMAT_EXTENSIBLE sub-format GUID shares (KSDATAFORMAT_SUBTYPE_PCM / _IEEE_FLOAT).
const GUID_TAIL = [0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71];

/** @param {Uint8Array} bytes @param {number} at */
const fourCC = (bytes, at) => String.fromCharCode(...bytes.subarray(at, at + 4));

/**
 * A WAV file's samples, channel by channel, as soundfile.read(dtype="float32") gives them.
 * @param {Uint8Array | ArrayBuffer} input
 * @param {string} [name] what an error calls the file
 * @returns {{channels: Float32Array[], sampleRate: number}}
 */
export function readWav(input, name) {
  const bytes = input instanceof Uint8Array ? input : new Uint8Array(input);
  /** @param {string} problem @returns {never} */
  const fail = (problem) => {
    throw new UserError(`cannot read ${name ? `audio file ${name}` : "the audio"}: ${problem}; ${FORMATS}`);
  };
  if (bytes.length < 12 || fourCC(bytes, 8) !== "WAVE" || fourCC(bytes, 0) !== "RIFF") {
    const kind = bytes.length >= 4 && ["RIFX", "RF64"].includes(fourCC(bytes, 0)) ? `a ${fourCC(bytes, 0)} file` : "not a WAV file";
    fail(`it is ${kind}`);
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  /** @type {{tag: number, channels: number, sampleRate: number, blockAlign: number, bits: number} | null} */
  let format = null;
  /** @type {Uint8Array | null} */
  let data = null;
  for (let at = 12; at + 8 <= bytes.length;) {
    const id = fourCC(bytes, at);
    const size = view.getUint32(at + 4, true);
    const body = at + 8;
    if (id === "fmt ") {
      if (size < 16 || body + 16 > bytes.length) fail("its fmt chunk is cut short");
      format = { tag: view.getUint16(body, true), channels: view.getUint16(body + 2, true),
        sampleRate: view.getUint32(body + 4, true), blockAlign: view.getUint16(body + 12, true),
        bits: view.getUint16(body + 14, true) };
      if (format.tag === EXTENSIBLE) {
        if (size < 40 || body + 40 > bytes.length) fail("its WAVE_FORMAT_EXTENSIBLE fmt chunk is cut short");
        if (!GUID_TAIL.every((b, i) => bytes[body + 26 + i] === b)) fail("its WAVE_FORMAT_EXTENSIBLE sub-format is not PCM or float");
        format.tag = view.getUint16(body + 24, true);
      }
    } else if (id === "data") {
      // A length past the end (a stream's placeholder, or a cut file) reads what is there, as libsndfile does.
      data = bytes.subarray(body, Math.min(body + size, bytes.length));
      if (format !== null) break;
    }
    at = body + size + (size & 1);
  }
  if (format === null) fail("it has no fmt chunk");
  if (data === null) fail("it has no data chunk");
  const { tag, channels, sampleRate, blockAlign, bits } = format;
  const pcm = tag === PCM && [8, 16, 24, 32].includes(bits);
  const float = tag === FLOAT && (bits === 32 || bits === 64);
  if (!pcm && !float) {
    const what = tag === PCM ? `${bits}-bit PCM` : tag === FLOAT ? `${bits}-bit float` : `format ${tagName(tag)}`;
    fail(`it holds ${what}`);
  }
  if (channels < 1 || sampleRate < 1) fail(`its header gives ${channels} channels at ${sampleRate} Hz`);
  const width = bits / 8;
  if (blockAlign !== channels * width) fail(`its block align is ${blockAlign} bytes where ${channels} channels of ${bits} bits take ${channels * width}`);
  return { channels: samples(data, channels, width, float), sampleRate };
}

/** @param {number} tag */
function tagName(tag) {
  const known = /** @type {Record<number, string>} */ ({ 2: "MS ADPCM", 6: "A-law", 7: "mu-law", 0x11: "IMA ADPCM",
    0x31: "GSM 6.10", 0x55: "MP3" })[tag];
  return `0x${tag.toString(16).padStart(4, "0")}${known ? ` (${known})` : ""}`;
}

/**
 * The data chunk's frames as float32 channels.
 * @param {Uint8Array} data @param {number} count channels @param {number} width bytes a sample @param {boolean} float
 */
function samples(data, count, width, float) {
  const frames = Math.floor(data.length / (count * width));
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const channels = Array.from({ length: count }, () => new Float32Array(frames));
  const step = count * width;
  for (let c = 0; c < count; c++) {
    const out = channels[c];
    let at = c * width;
    if (float && width === 4) for (let i = 0; i < frames; i++, at += step) out[i] = view.getFloat32(at, true);
    else if (float) for (let i = 0; i < frames; i++, at += step) out[i] = view.getFloat64(at, true);
    else if (width === 1) for (let i = 0; i < frames; i++, at += step) out[i] = (data[at] - 128) / 128;
    else if (width === 2) for (let i = 0; i < frames; i++, at += step) out[i] = view.getInt16(at, true) / 32768;
    else if (width === 3) {
      for (let i = 0; i < frames; i++, at += step) {
        out[i] = ((data[at] | (data[at + 1] << 8) | (data[at + 2] << 16)) << 8) / 2147483648;
      }
    } else for (let i = 0; i < frames; i++, at += step) out[i] = view.getInt32(at, true) / 2147483648;
  }
  return channels;
}

/**
 * One sample as libsndfile writes float to 16-bit PCM with clipping on (pcm.c f2les_clip_array).
 * @param {number} sample
 */
export function pcm16(sample) {
  const scaled = Math.fround(sample) * 2147483648; // exact: float32 times a power of two
  if (scaled >= 2147483647) return 32767;
  if (scaled <= -2147483648 || Number.isNaN(scaled)) return -32768; // lrintf(NaN) is INT_MIN on x86
  let rounded = Math.round(scaled);
  if (rounded - scaled === 0.5 && rounded % 2 !== 0) rounded -= 1; // lrintf rounds half to even
  return rounded >> 16;
}

/**
 * A 16-bit PCM WAV of mono samples, the bytes soundfile.write(subtype="PCM_16") writes (outputs.py write_audio).
 * @param {Float32Array | ArrayLike<number>} samples
 * @param {number} sampleRate
 * @returns {Uint8Array}
 */
export function encodeWav(samples, sampleRate) {
  if (!(Number.isInteger(sampleRate) && sampleRate > 0)) throw new UserError(`a WAV's sample rate is a whole number of Hz > 0, got ${sampleRate}`);
  const dataBytes = samples.length * 2;
  const out = new Uint8Array(44 + dataBytes);
  const view = new DataView(out.buffer);
  const text = (/** @type {number} */ at, /** @type {string} */ s) => {
    for (let i = 0; i < 4; i++) out[at + i] = s.charCodeAt(i);
  };
  text(0, "RIFF");
  view.setUint32(4, 36 + dataBytes, true);
  text(8, "WAVE");
  text(12, "fmt ");
  view.setUint32(16, 16, true);
  view.setUint16(20, PCM, true);
  view.setUint16(22, 1, true);
  view.setUint32(24, sampleRate, true);
  view.setUint32(28, sampleRate * 2, true);
  view.setUint16(32, 2, true);
  view.setUint16(34, 16, true);
  text(36, "data");
  view.setUint32(40, dataBytes, true);
  for (let i = 0; i < samples.length; i++) view.setInt16(44 + 2 * i, pcm16(samples[i]), true);
  return out;
}
