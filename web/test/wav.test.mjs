/**
 * web/src/audio/wav.mjs: every WAV the Node runtime reads (PCM 8/16/24/32-bit, float 32/64, WAVE_FORMAT_EXTENSIBLE)
 * gives libsndfile's float32 samples, anything else is one line naming what is read, and encodeWav quantizes as
 * soundfile's PCM_16 does. (tests/web/test_js_voices.py holds both against soundfile's own files.)
 */
import test from "node:test";
import assert from "node:assert/strict";
import { encodeWav, pcm16, readWav } from "../src/audio/wav.mjs";
import { UserError } from "../src/errors.mjs";

/**
 * A WAV file by hand: a fmt chunk (plain or extensible) and a data chunk, with chunks before it.
 * @param {{tag?: number, channels: number, rate: number, bits: number, data: Uint8Array, extensible?: number,
 *   before?: Uint8Array, dataSize?: number}} spec
 */
function wavFile({ tag = 1, channels, rate, bits, data, extensible, before = new Uint8Array(0), dataSize }) {
  const fmtSize = extensible === undefined ? 16 : 40;
  const out = new Uint8Array(12 + 8 + fmtSize + before.length + 8 + data.length);
  const view = new DataView(out.buffer);
  const text = (/** @type {number} */ at, /** @type {string} */ s) => [...s].forEach((c, i) => (out[at + i] = c.charCodeAt(0)));
  text(0, "RIFF");
  view.setUint32(4, out.length - 8, true);
  text(8, "WAVE");
  text(12, "fmt ");
  view.setUint32(16, fmtSize, true);
  view.setUint16(20, extensible === undefined ? tag : 0xfffe, true);
  view.setUint16(22, channels, true);
  view.setUint32(24, rate, true);
  view.setUint32(28, rate * channels * (bits / 8), true);
  view.setUint16(32, channels * (bits / 8), true);
  view.setUint16(34, bits, true);
  if (extensible !== undefined) {
    view.setUint16(36, 22, true);
    view.setUint16(38, bits, true);
    view.setUint32(40, 3, true);
    view.setUint16(44, extensible, true);
    out.set([0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xaa, 0x00, 0x38, 0x9b, 0x71], 46);
  }
  let at = 20 + fmtSize;
  out.set(before, at);
  at += before.length;
  text(at, "data");
  view.setUint32(at + 4, dataSize ?? data.length, true);
  out.set(data, at + 8);
  return out;
}

/** Interleaved little-endian integers of a width. @param {number[]} values @param {number} width */
function ints(values, width) {
  const out = new Uint8Array(values.length * width);
  values.forEach((v, i) => {
    for (let b = 0; b < width; b++) out[i * width + b] = Number((BigInt(v) >> BigInt(8 * b)) & 0xffn);
  });
  return out;
}

test("PCM of each width reads as libsndfile scales it: by 2^(bits-1), 8-bit unsigned around 128", () => {
  const int16 = [0, 1, -1, 32767, -32768, 12345];
  const got16 = readWav(wavFile({ channels: 1, rate: 24000, bits: 16, data: ints(int16, 2) }));
  assert.equal(got16.sampleRate, 24000);
  assert.deepEqual(Array.from(got16.channels[0]), int16.map((v) => v / 32768));
  const int24 = [0, 1, -1, 8388607, -8388608, -123456];
  const got24 = readWav(wavFile({ channels: 1, rate: 16000, bits: 24, data: ints(int24, 3) }));
  assert.deepEqual(Array.from(got24.channels[0]), int24.map((v) => v / 8388608));
  const int32 = [0, 1, -1, 2147483647, -2147483648, 123456789];
  const got32 = readWav(wavFile({ channels: 1, rate: 44100, bits: 32, data: ints(int32, 4) }));
  assert.deepEqual(Array.from(got32.channels[0]), int32.map((v) => Math.fround(v / 2147483648)));
  const u8 = [128, 0, 255, 129, 127];
  const got8 = readWav(wavFile({ channels: 1, rate: 8000, bits: 8, data: Uint8Array.from(u8) }));
  assert.deepEqual(Array.from(got8.channels[0]), u8.map((v) => (v - 128) / 128));
});

test("float WAVs read as float32 (float64 rounded), channels apart, extensible as plain", () => {
  const left = [0.25, -1.5, 3.0000001];
  const right = [1e-40, 0.1, -0.1];
  const f64 = new Float64Array([left[0], right[0], left[1], right[1], left[2], right[2]]);
  const got = readWav(wavFile({ tag: 3, channels: 2, rate: 48000, bits: 64, data: new Uint8Array(f64.buffer) }));
  assert.deepEqual(Array.from(got.channels[0]), left.map(Math.fround));
  assert.deepEqual(Array.from(got.channels[1]), right.map(Math.fround));
  const f32 = Float32Array.from([0.5, -0.75, 2]);
  const ext = readWav(wavFile({ channels: 1, rate: 22050, bits: 32, data: new Uint8Array(f32.buffer), extensible: 3 }));
  assert.deepEqual(ext.channels[0], f32);
  const pcmExt = readWav(wavFile({ channels: 3, rate: 24000, bits: 24, data: ints([1, 2, 3, -1, -2, -3], 3), extensible: 1 }));
  assert.deepEqual(pcmExt.channels.map((c) => Array.from(c)), [[1, -1], [2, -2], [3, -3]].map((c) => c.map((v) => v / 8388608)));
});

test("chunks before the data (odd-sized, padded) are skipped, and a data size past the end reads what is there", () => {
  const list = Uint8Array.from([...Array.from("LIST", (c) => c.charCodeAt(0)), 3, 0, 0, 0, 1, 2, 3, 0]);
  const got = readWav(wavFile({ channels: 1, rate: 24000, bits: 16, data: ints([100, -100, 7], 2), before: list }));
  assert.deepEqual(Array.from(got.channels[0]), [100, -100, 7].map((v) => v / 32768));
  const streamed = readWav(wavFile({ channels: 2, rate: 24000, bits: 16, data: ints([1, 2, 3, 4, 5], 2), dataSize: 0xffffffff }));
  assert.deepEqual(streamed.channels.map((c) => c.length), [2, 2]); // the half frame at the end is dropped
});

test("anything but PCM and float WAV is one line saying which formats are read", () => {
  /** @type {[Uint8Array, RegExp][]} */
  const cases = [
    [new TextEncoder().encode("ID3\x04\x00 an mp3"), /it is not a WAV file/],
    [Uint8Array.from([...new TextEncoder().encode("RIFX"), 0, 0, 0, 4, ...new TextEncoder().encode("WAVE")]), /it is a RIFX file/],
    [wavFile({ tag: 2, channels: 1, rate: 8000, bits: 16, data: new Uint8Array(4) }), /it holds format 0x0002 \(MS ADPCM\)/],
    [wavFile({ channels: 1, rate: 8000, bits: 12, data: new Uint8Array(4) }), /it holds 12-bit PCM/],
    [wavFile({ tag: 3, channels: 1, rate: 8000, bits: 16, data: new Uint8Array(4) }), /it holds 16-bit float/],
    [wavFile({ channels: 0, rate: 8000, bits: 16, data: new Uint8Array(4) }), /0 channels/],
    [wavFile({ channels: 1, rate: 8000, bits: 16, data: new Uint8Array(4) }).subarray(0, 30), /fmt chunk is cut short/],
  ];
  for (const [bytes, expected] of cases) {
    try {
      readWav(bytes, "clip.bin");
      assert.fail("read");
    } catch (error) {
      assert.ok(error instanceof UserError);
      const message = /** @type {Error} */ (error).message;
      assert.match(message, expected);
      assert.ok(message.startsWith("cannot read audio file clip.bin: ") && !message.includes("\n"), message);
      assert.match(message, /Node reads WAV: PCM 8, 16, 24 or 32-bit, or float 32 or 64-bit/);
    }
  }
  const noData = wavFile({ channels: 1, rate: 8000, bits: 16, data: new Uint8Array(0) });
  assert.throws(() => readWav(noData.subarray(0, 36)), /the audio: it has no data chunk/);
});

test("encodeWav writes libsndfile's 44-byte PCM_16 header, and its samples read back as they were quantized", () => {
  const samples = Float32Array.from({ length: 1001 }, (_, i) => Math.sin(i / 7) * (i % 3 === 0 ? 1.2 : 0.9));
  const bytes = encodeWav(samples, 24000);
  assert.equal(bytes.length, 44 + 2 * samples.length);
  const view = new DataView(bytes.buffer);
  assert.equal(new TextDecoder().decode(bytes.subarray(0, 4)), "RIFF");
  assert.equal(view.getUint32(4, true), bytes.length - 8);
  assert.deepEqual([view.getUint16(20, true), view.getUint16(22, true), view.getUint32(24, true), view.getUint32(28, true),
    view.getUint16(32, true), view.getUint16(34, true), view.getUint32(40, true)], [1, 1, 24000, 48000, 2, 16, 2 * samples.length]);
  const back = readWav(bytes);
  assert.deepEqual(Array.from(back.channels[0]), Array.from(samples, (s) => pcm16(s) / 32768));
  assert.throws(() => encodeWav(samples, 0), UserError);
});

test("PCM_16 quantization: clipped at both ends, NaN to the bottom, and within a step of the scaled sample", () => {
  // The anchors soundfile 0.13.1 (libsndfile 1.2.2) writes (tests/web/test_js_voices.py checks every sample).
  assert.deepEqual([1, -1, 1.5, -1.5, 1e10, -1e10, Infinity, -Infinity, NaN, 0, 0.5].map(pcm16),
    [32767, -32768, 32767, -32768, 32767, -32768, 32767, -32768, -32768, 0, 16384]);
  for (let i = 0; i < 2000; i++) {
    const x = Math.fround(Math.sin(i * 12.9898) * 0.999);
    const q = pcm16(x);
    assert.ok(q >= -32768 && q <= 32767);
    assert.ok(Math.abs(q - x * 32768) <= 1, `${x}: ${q}`); // floor(x * 2^15), to within rounding at 2^-16
  }
  assert.ok(pcm16(-1e-9) === -1 && pcm16(1e-9) === 0); // the top 16 bits: floor, not round
});
