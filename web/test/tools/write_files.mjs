/**
 * Write files with the JS runtime's writers, for tests/web/test_js_voices.py to read back in Python. The spec
 * comes on stdin as JSON:
 *   voices: [{codes: number[] (8 x frames), frames, text, rms, npz?: path, pt?: path}]
 *   npy:    [{values: string[] (decimal) | number[], shape, dtype: "int64" | "int32" | "float32", path}]
 *   wav:    [{samples: path of raw little-endian float32, sampleRate, path}]
 */
import fs from "node:fs";
import { Voice } from "../../src/voices/voice.mjs";
import { encodeWav } from "../../src/audio/wav.mjs";
import { writeNpy } from "../../src/audio/npy.mjs";

const spec = JSON.parse(fs.readFileSync(0, "utf8"));
for (const v of spec.voices ?? []) {
  const voice = new Voice(Int32Array.from(v.codes), v.frames, v.text, v.rms);
  if (v.npz) fs.writeFileSync(v.npz, voice.toBytes("npz"));
  if (v.pt) fs.writeFileSync(v.pt, voice.toBytes("pt"));
}
for (const n of spec.npy ?? []) {
  const values = n.dtype === "float32" ? Float32Array.from(n.values.map(Number))
    : n.dtype === "int32" ? Int32Array.from(n.values.map(Number)) : BigInt64Array.from(n.values.map(BigInt));
  fs.writeFileSync(n.path, writeNpy(values, n.shape));
}
for (const w of spec.wav ?? []) {
  const raw = fs.readFileSync(w.samples);
  const samples = new Float32Array(raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength));
  fs.writeFileSync(w.path, encodeWav(samples, w.sampleRate));
}
