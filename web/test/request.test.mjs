// Requests settled as the Python runtime settles them (docs/runtime.md stage 1: tests/conformance/settle.json, every
// case), the refusals, the long-text plan (stage 6), and the generation settings against contract/settings.py.
import assert from "node:assert/strict";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";

import { UserError } from "../src/errors.mjs";
import { chunkRequests, firstChunkVoice, isLong, longFormChunks, needsTranscript, onePerText, planDecoding, settle }
  from "../src/request.mjs";
import { CAMEL_CASE, DEFAULT_SETTINGS, SNAKE_CASE, manifestDefaults, maxItemFrames, settingsFrom, settingsFromFlags,
  settingsOfRequest }
  from "../src/settings.mjs";
import { estimateTargetTokens } from "../src/text/duration.mjs";
import { resolveInstruct, resolveLanguage, sequenceRatio, suggestInstructItem } from "../src/text/voice_design.mjs";
import { ROOT, differences, vector } from "./vectors.mjs";

/** @param {string} text @param {number} frames */
function voiceOf(text, frames) {
  return { codes: new Int32Array(8 * frames), frames, text, rms: null };
}

test("settle.json: language, instruct, target length and speed, and the refusals, every case", () => {
  const { cases, tolerance } = vector("settle");
  assert.ok(cases.length > 0);
  /** @type {string[]} */
  const warnings = [];
  const found = cases.flatMap(({ name, inputs, expected }) => {
    const voice = inputs.voice ? voiceOf(inputs.voice.text, inputs.voice.frames) : null;
    let actual;
    try {
      const [request] = settle([inputs.text], inputs.language, inputs.instruct, voice, inputs.duration, inputs.speed,
        inputs.num_frames, false, { warn: (message) => warnings.push(message) });
      actual = { text: request.text, lang: request.lang, instruct: request.instruct, target_len: request.targetLen,
        speed: request.speed };
    } catch (error) {
      if (!(error instanceof UserError)) throw error;
      actual = { error: "UserError" };
    }
    return differences(actual, expected, tolerance, name);
  });
  assert.deepEqual(found, []);
  assert.ok(warnings.some((w) => w.startsWith("Language 'klingon' is not recognized")), "an unknown language warns");
});

test("settle refuses what Python refuses, in one line", () => {
  const refusals = [
    [() => settle([]), /^no text to synthesize$/],
    [() => settle(["  \n"]), /^text is empty; give at least one word to synthesize$/],
    [() => settle(["a", "b", "c"], ["en", "fr"]), /^language has 2 values for 3 texts; give one, or one per text$/],
    [() => settle(["a"], null, null, null, -1), /^duration must be > 0 seconds, got -1$/],
    [() => settle(["a"], null, null, null, null, 0.0), /^speed must be > 0, got 0$/],
    [() => settle(["a"], null, null, null, null, NaN), /^speed must be > 0, got nan$/],
    [() => settle(["a"], null, null, null, null, null, 0), /^the number of audio tokens must be >= 1, got 0$/],
    [() => settle(["a"], null, null, null, null, null, null, true), /^normalize_text needs WeTextProcessing/],
    [() => settle(["a"], null, "femal, british accent"),
      /^unsupported instruct items in 'femal, british accent': 'femal' -> 'femal' \(unsupported; did you mean 'female'\?\)\. Valid English items: american accent, /],
    [() => settle(["a"], null, "male, female"), /^conflicting instruct items within the same category: 'male' vs 'female'; /],
    [() => settle(["a"], null, "british accent, 四川话"), /^instruct 'british accent, 四川话' mixes a Chinese dialect /],
  ];
  for (const [call, message] of /** @type {[() => any, RegExp][]} */ (refusals)) {
    assert.throws(call, (error) => error instanceof UserError && message.test(error.message) && !error.message.includes("\n"),
      String(message));
  }
});

test("one value serves every text, or one per text", () => {
  assert.deepEqual(onePerText("en", 3, "language"), ["en", "en", "en"]);
  assert.deepEqual(onePerText([1, 2], 2, "speed"), [1, 2]);
  const requests = settle(["Hello there.", "你好。"], ["English", "zh"], null, null, null, [1.0, 2.0]);
  assert.deepEqual(requests.map((r) => [r.lang, r.speed]), [["en", 1.0], ["zh", 2.0]]);
  assert.equal(requests[1].targetLen, estimateTargetTokens("你好。", null, null, 2.0));
});

test("languages and instructs resolve as upstream's rules say", () => {
  assert.equal(resolveLanguage("NONE"), null);
  assert.equal(resolveLanguage("en"), "en");
  assert.equal(resolveLanguage("eNgLiSh"), "en");
  assert.equal(resolveLanguage("constructor", () => {}), null); // no object key is a language
  assert.equal(resolveInstruct("  "), null);
  assert.equal(resolveInstruct("男， 青年"), "male, young adult"); // no Chinese in the text: English items
  assert.equal(resolveInstruct("male, young adult", true), "男，青年");
  assert.equal(resolveInstruct("Male,Indian Accent", true), "male, indian accent"); // an accent forces English
});

test("the suggestion is difflib's: Ratcliff/Obershelp ratio, cutoff 0.6", () => {
  assert.equal(sequenceRatio("abcd", "bcde"), 0.75); // difflib.SequenceMatcher(None, "abcd", "bcde").ratio()
  assert.equal(sequenceRatio("", ""), 1.0);
  assert.equal(suggestInstructItem("whispr"), "whisper");
  assert.equal(suggestInstructItem("zzzzzz"), null);
  // From 200 characters of b, difflib's autojunk drops popular characters as anchors: b + its own copy shifted by
  // one then matches nothing (difflib says 0.0), though a match found at the start still extends over them.
  const long = "a".repeat(150) + "b".repeat(60);
  assert.equal(sequenceRatio(long, long), 1.0);
  assert.equal(sequenceRatio("b" + long, long), 0.0);
});

test("a long request is cut into chunks, each cloning the request's voice or the first chunk's", () => {
  const settings = settingsFrom({ audioChunkThreshold: 2, audioChunkDuration: 1 });
  const text = "The first sentence is here. A second one follows it. Then a third. And a fourth, the last.";
  const [plain] = settle([text]);
  assert.ok(isLong(plain, settings) && plain.targetLen > maxItemFrames(settings));
  const chunks = chunkRequests(plain, settings);
  assert.deepEqual(chunks.map((c) => c.text), longFormChunks(plain, settings));
  assert.ok(chunks.length > 2);
  assert.equal(chunks[0].targetLen, estimateTargetTokens(chunks[0].text, null, null, plain.speed));
  for (const chunk of chunks.slice(1)) {
    assert.equal(chunk.voice, null);
    assert.equal(chunk.targetLen, estimateTargetTokens(chunk.text, chunks[0].text, chunks[0].targetLen, plain.speed));
  }
  const voice = voiceOf("The words of the clip.", 60);
  const [cloned] = settle([text], null, null, voice);
  for (const chunk of chunkRequests(cloned, settings)) {
    assert.equal(chunk.voice, voice);
    assert.equal(chunk.targetLen, estimateTargetTokens(chunk.text, voice.text, 60, cloned.speed));
  }
  const first = firstChunkVoice({ data: new Int32Array(8 * 5), frames: 5 }, "First.");
  assert.deepEqual([first.frames, first.text, first.rms], [5, "First.", null]);
});

test("the plan decodes the short requests first, then the long ones by chunk index", () => {
  const settings = settingsFrom({ audioChunkThreshold: 2, audioChunkDuration: 1 });
  const long = "The first sentence is here. A second one follows it. Then a third. And a fourth, the last.";
  const requests = settle(["Hi.", long, "Yo.", long + " One more sentence, then the end."]);
  const plan = planDecoding(requests, settings, null, 7);
  const lengths = [1, 3].map((i) => chunkRequests(requests[i], settings).length);
  assert.deepEqual(plan.rounds[0].map(([i]) => i), [0, 2]);
  assert.equal(plan.rounds.length, 1 + Math.max(...lengths));
  assert.deepEqual(plan.rounds[1].map(([i]) => i), [1, 3]);
  assert.deepEqual([...plan.clonesFirstChunk], [1, 3]);
  assert.equal(plan.noises.length, requests.length);
  const shared = { uniform: () => new Float32Array(0) };
  assert.ok(planDecoding(requests, settings, shared).noises.every((n) => n === shared));
  const voiced = settle([long, long], null, null, [voiceOf("Clip.", 20), null]);
  assert.throws(() => planDecoding(voiced, settings),
    { name: "UserError", message: /^long texts in one batch must all have a reference voice or none$/ });
  assert.ok(needsTranscript(" ") && needsTranscript(null) && !needsTranscript("Words."));
});

test("the settings' defaults are contract/settings.py's, and their refusals its messages", () => {
  const source = fs.readFileSync(path.join(ROOT, "codes", "runtime", "contract", "settings.py"), "utf8");
  const fields = [...source.matchAll(/^ {4}(\w+): (int|float|bool) = ([\w.]+)/gm)];
  assert.equal(fields.length, Object.keys(DEFAULT_SETTINGS).length);
  for (const [, name, , value] of fields) {
    const key = CAMEL_CASE[name];
    assert.equal(SNAKE_CASE[key], name);
    const python = value === "True" ? true : value === "False" ? false : Number(value);
    assert.equal(/** @type {any} */ (DEFAULT_SETTINGS)[key], python, name);
  }
  assert.deepEqual(settingsFrom({ num_steps: 8, tShift: 0.5 }), { ...DEFAULT_SETTINGS, numSteps: 8, tShift: 0.5 });
  assert.deepEqual(settingsFrom({ numSteps: undefined }), DEFAULT_SETTINGS);
  const refusals = [
    [{ numSteps: 0 }, "num_steps must be a whole number >= 1, got 0"],
    [{ numSteps: 2.5 }, "num_steps must be a whole number >= 1, got 2.5"],
    [{ tShift: 0 }, "t_shift must be > 0, got 0.0"],
    [{ guidanceScale: Infinity }, "guidance_scale must be a finite number, got inf"],
    [{ classTemperature: -1 }, "class_temperature must be >= 0 (0 means argmax), got -1.0"],
    [{ denoise: "yes" }, "denoise must be true or false, got 'yes'"],
    [{ padDuration: null }, "pad_duration must be >= 0 seconds, got None"],
    [{ speedy: 1, numStep: 3 }, "unknown generation setting(s): speedy"],
  ];
  for (const [values, message] of /** @type {[Record<string, any>, string][]} */ (refusals)) {
    assert.throws(() => settingsFrom(values), { name: "UserError", message });
  }
  const base = manifestDefaults({ ...Object.fromEntries(Object.entries(DEFAULT_SETTINGS).map(([k, v]) => [SNAKE_CASE[
    /** @type {keyof typeof SNAKE_CASE} */ (k)], v])), num_steps: 16 });
  assert.equal(base.numSteps, 16);
  const ofRequest = settingsOfRequest({ text: "Hi.", language: "en", seed: 3, guidanceScale: 1.5 }, base);
  assert.deepEqual(ofRequest, { ...DEFAULT_SETTINGS, numSteps: 16, guidanceScale: 1.5 });
  assert.throws(() => settingsOfRequest({ text: "Hi.", guidanceScal: 1 }),
    { name: "UserError", message: "unknown generation setting(s): guidanceScal" });
  assert.equal(settingsFromFlags({ denoise: "false" }).denoise, false);
  assert.equal(settingsFromFlags({ no_postprocess: true }).postprocessOutput, false);
  assert.throws(() => settingsFromFlags({ denoise: "true", no_denoise: true }),
    { name: "UserError", message: "--denoise true and --no_denoise contradict each other; give one" });
});
