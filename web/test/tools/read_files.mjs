/**
 * Read files with the JS runtime's readers and print what they hold as JSON, for tests/web/test_js_voices.py:
 * the list of {kind: "voice" | "wav" | "npy", path} comes on stdin; each answer is what the reader gives, or
 * {error} with the one-line message it refused the file with.
 *   voice: {codes: number[] (8 x frames, row-major), frames, text, rms}
 *   wav:   {channels: number[][], sampleRate}  (float32 values, exact in JSON)
 *   npy:   {data: string[] (decimal), shape, dtype}
 */
import fs from "node:fs";
import { Voice } from "../../src/voices/voice.mjs";
import { readWav } from "../../src/audio/wav.mjs";
import { readNpy } from "../../src/audio/npy.mjs";
import { UserError } from "../../src/errors.mjs";

const requests = JSON.parse(fs.readFileSync(0, "utf8"));
const answers = [];
for (const { kind, path } of requests) {
  try {
    if (kind === "voice") {
      const voice = await Voice.load(path);
      answers.push({ codes: Array.from(voice.codes), frames: voice.frames, text: voice.text, rms: voice.rms });
    } else if (kind === "wav") {
      const { channels, sampleRate } = readWav(new Uint8Array(fs.readFileSync(path)), path);
      answers.push({ channels: channels.map((c) => Array.from(c)), sampleRate });
    } else {
      const { data, shape, dtype } = readNpy(new Uint8Array(fs.readFileSync(path)), path);
      answers.push({ data: Array.from(data, String), shape, dtype });
    }
  } catch (error) {
    if (!(error instanceof UserError)) throw error;
    answers.push({ error: error.message });
  }
}
process.stdout.write(JSON.stringify(answers));
