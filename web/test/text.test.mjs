// The text side against the Python runtime's vectors (docs/runtime.md stages 2, 3 and 6): tests/conformance/text.json,
// stream_chunks.json and duration.json, every case, run as codes/checks/conformance.py runs it.
import assert from "node:assert/strict";
import { test } from "node:test";

import { TextStream, streamChunks } from "../src/text/chunks.mjs";
import { addPunctuation, chunkLongText, chunkTextPunctuation, combineText, containsChinese, splitNonverbal }
  from "../src/text/cleanup.mjs";
import { FALLBACK_REF_FRAMES, FALLBACK_REF_TEXT, charWeight, estimateFrames, resolveTargetLen, textWeight }
  from "../src/text/duration.mjs";
import { isAllSpace, reprFloat, reprString, splitWords, strip } from "../src/text/python.mjs";
import { differences, vector } from "./vectors.mjs";

/** Every case of a stage run by `run`, its differences from the expected outputs listed by case. @param {string} stage @param {(inputs: any) => any} run */
function checkStage(stage, run) {
  const { cases, tolerance } = vector(stage);
  assert.ok(cases.length > 0, `${stage}.json has no cases`);
  const found = cases.flatMap((c) => differences(run(c.inputs), c.expected, tolerance, c.name));
  assert.deepEqual(found, []);
  return cases.length;
}

test("text.json: clean-up, end punctuation, non-verbal tags and long-form chunks, every case", () => {
  checkStage("text", (inputs) => {
    const text = inputs.text;
    /** @type {Record<string, any>} */
    const out = {
      combine_text: combineText(text, inputs.ref_text),
      add_punctuation: addPunctuation(text),
      split_nonverbal: splitNonverbal(text),
      contains_chinese: containsChinese(text),
      chunk_text_punctuation: chunkTextPunctuation(text, inputs.chunk_len, inputs.min_chunk_len),
    };
    if (text) out.chunk_long_text = chunkLongText(text, inputs.target_len, inputs.audio_chunk_duration, inputs.frame_rate);
    return out;
  });
});

test("stream_chunks.json: whole texts and texts pushed a few characters (code points) at a time, every case", () => {
  checkStage("stream_chunks", (inputs) => {
    const chars = Array.from(inputs.text);
    const stream = new TextStream();
    const pushes = [];
    for (let start = 0; start < chars.length; start += inputs.push_size) {
      pushes.push(stream.push(chars.slice(start, start + inputs.push_size).join("")));
    }
    return { stream_chunks: streamChunks(inputs.text), pushes, flush: stream.flush() };
  });
});

test("duration.json: character weights, frame estimates and target lengths with speed or duration, every case", () => {
  checkStage("duration", (inputs) => {
    if (inputs.chars) return { weights: inputs.chars.map(charWeight) };
    const { text, ref_text: refText, ref_frames: refFrames } = inputs;
    const [targetLen, speed] = resolveTargetLen(text, refText, refFrames, inputs.speed, inputs.duration);
    const frames = refText ? estimateFrames(text, refText, refFrames)
      : estimateFrames(text, FALLBACK_REF_TEXT, FALLBACK_REF_FRAMES);
    return { estimate_frames: frames, target_len: targetLen, speed };
  });
});

test("a changed expectation is found: the vector check is no formality", () => {
  const { cases } = vector("text");
  const changed = structuredClone(cases[0].expected);
  changed.chunk_text_punctuation[0] += "x";
  const text = cases[0].inputs.text;
  const actual = chunkTextPunctuation(text, cases[0].inputs.chunk_len, cases[0].inputs.min_chunk_len);
  assert.equal(differences(actual, changed.chunk_text_punctuation, 0).length, 1);
});

test("streamed chunks keep every character, in order, whatever the push size", () => {
  for (const { inputs } of vector("stream_chunks").cases) {
    const squeeze = (/** @type {string} */ s) => Array.from(s).filter((c) => !isAllSpace(c)).join("");
    for (const size of [1, 2, 7, 1000]) {
      const stream = new TextStream();
      const chars = Array.from(inputs.text);
      const chunks = [];
      for (let start = 0; start < chars.length; start += size) chunks.push(...stream.push(chars.slice(start, start + size).join("")));
      chunks.push(...stream.flush());
      assert.equal(squeeze(chunks.join("")), squeeze(inputs.text), `push size ${size}: ${inputs.text}`);
    }
  }
});

test("Python's string rules: white space as str.isspace, the float repr, astral characters as one", () => {
  assert.equal(strip("\x1c\x85 a \u3000"), "a"); // str.strip() takes U+001C and U+0085, JS trim() does not
  assert.equal(strip("\ufeffa"), "\ufeffa"); // ...and leaves U+FEFF, which JS trim() takes
  assert.deepEqual(splitWords(" Mr.\x1fSmith "), ["Mr.", "Smith"]);
  assert.equal(reprFloat(1e-5), "1e-05");
  assert.equal(reprFloat(2), "2.0");
  assert.equal(reprFloat(1e16), "1e+16");
  assert.equal(reprFloat(0.0001), "0.0001");
  assert.equal(reprString("it's"), `"it's"`);
  assert.equal(textWeight("𠀁"), charWeight("𠀁")); // one code point, not two halves
  assert.deepEqual(chunkTextPunctuation("🙂🙂. ab.", 3, null), ["🙂🙂.", "ab."]); // lengths in code points
});
