// Token ids and prompts against the Python runtime's vectors (docs/runtime.md stages 4 and 5): tests/conformance/
// tokens.json and prompt.json, every case, over the tokenizer.json every generated checkpoint ships. That file is
// written by Python (codes/export/tokenizer_build.py): tests/web/test_js_tokens.py writes it into a folder and runs
// this file with OMNIVOICE_TOKENIZER_DIR naming it. Without the variable this file fails; it never skips.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import fs from "node:fs";
import path from "node:path";
import { test } from "node:test";

import { UserError } from "../src/errors.mjs";
import { settle } from "../src/request.mjs";
import { TextTokenizer } from "../src/text/tokenizer.mjs";
import { AUDIO_MASK_ID, NUM_CODEBOOKS } from "../src/contract/specs.mjs";
import { buildCfgBatch, buildPrompt, checkRefCodes, promptBatch, textTokenIds } from "../src/voices/prompt.mjs";
import { differences, vector } from "./vectors.mjs";

const FOLDER = process.env.OMNIVOICE_TOKENIZER_DIR;
if (!FOLDER) {
  throw new Error("OMNIVOICE_TOKENIZER_DIR is not set: it names a folder holding the tokenizer.json and " +
    "tokenizer_config.json codes/export/tokenizer_build.py writes; run tests/web/test_js_tokens.py, which sets it");
}
const tokenizer = await TextTokenizer.load(FOLDER);
const tokenizerSha256 = createHash("sha256").update(fs.readFileSync(path.join(FOLDER, "tokenizer.json"))).digest("hex");

/** A flat C-order array as nested lists of `shape`. @param {ArrayLike<number | bigint>} flat @param {number[]} shape @returns {any[]} */
function nested(flat, shape, offset = 0) {
  const [size, ...rest] = shape;
  const step = rest.reduce((a, b) => a * b, 1);
  return Array.from({ length: size }, (_, i) => (rest.length === 0 ? Number(flat[offset + i]) : nested(flat, rest, offset + i * step)));
}

/** @param {any} item a prompt case's item, as conformance.py's _prompt_item reads it */
function promptItem(item) {
  return buildPrompt(tokenizer, item.text, item.target_len, { refText: item.ref_text ?? null,
    refCodes: item.ref_codes ?? null, lang: item.lang, instruct: item.instruct, denoise: item.denoise ?? true });
}

test("the tokenizer is the one the vectors were written with", () => {
  for (const stage of ["tokens", "prompt"]) {
    assert.equal(tokenizerSha256, /** @type {any} */ (vector(stage)).tokenizer_sha256, stage);
  }
});

test("tokens.json: ids of plain text, tags and the non-verbal split, every case", () => {
  const { cases, tolerance } = vector("tokens");
  assert.ok(cases.length > 0);
  const found = cases.flatMap(({ name, inputs, expected }) => {
    const ids = "encode" in inputs ? tokenizer.encode(inputs.encode) : textTokenIds(tokenizer, inputs.text, inputs.ref_text);
    return differences({ ids }, expected, tolerance, name);
  });
  assert.deepEqual(found, []);
});

test("prompt.json: plain, design and clone prompts, and a CFG batch with its attention mask, every case", () => {
  const { cases, tolerance } = vector("prompt");
  assert.ok(cases.some((c) => "items" in c.inputs) && cases.some((c) => "item" in c.inputs));
  const found = cases.flatMap(({ name, inputs, expected }) => {
    if ("item" in inputs) {
      const prompt = promptItem(inputs.item);
      return differences({ input_ids: nested(prompt.inputIds, [NUM_CODEBOOKS, prompt.length]),
        audio_mask: prompt.audioMask }, expected, tolerance, name);
    }
    const batch = buildCfgBatch(inputs.items.map(promptItem), inputs.items.map((/** @type {any} */ item) => item.target_len));
    const S = batch.length;
    const attention = nested(batch.attentionMask, [batch.rows * S, S]).map((row) => row.join(""));
    assert.deepEqual(batch.dims, [batch.rows, NUM_CODEBOOKS, S]);
    return differences({ input_ids: nested(batch.inputIds, [batch.rows, NUM_CODEBOOKS, S]),
      audio_mask: nested(batch.audioMask, [batch.rows, S]), attention_mask: attention, cond_lens: batch.condLens },
    expected, tolerance, name);
  });
  assert.deepEqual(found, []);
});

test("a settled request's batch is the batch of its prompt", () => {
  const codes = { data: Int32Array.from({ length: 8 * 4 }, (_, i) => (i * 37) % 1024), frames: 4 };
  const [request] = settle(["Again [laughter]."], "en", "male", { codes: codes.data, frames: 4, text: "Clip.", rms: 0.1 });
  const batch = promptBatch(tokenizer, [request], true);
  const item = buildPrompt(tokenizer, request.text, request.targetLen, { refText: "Clip.", refCodes: codes, lang: "en",
    instruct: "male", denoise: true });
  assert.deepEqual(Array.from(batch.inputIds.subarray(0, 8 * item.length), Number), Array.from(item.inputIds));
  assert.equal(batch.inputIds[NUM_CODEBOOKS * item.length], BigInt(AUDIO_MASK_ID)); // the unconditional row: target only
});

test("bad reference codes and a missing token are refused in one line", () => {
  assert.throws(() => checkRefCodes({ data: new Int32Array(7 * 3), frames: 3 }),
    { name: "UserError", message: "reference codes must have shape [8, frames >= 1], got [7, 3]" });
  assert.throws(() => checkRefCodes([[1], [2]]), { name: "UserError", message: /^reference codes must have shape/ });
  assert.throws(() => checkRefCodes({ data: new Int32Array(8).fill(1024), frames: 1 }),
    { name: "UserError", message: "reference codes must be integers in [0, 1024); the voice prompt is damaged" });
  assert.throws(() => buildPrompt(tokenizer, "Hi.", 0), UserError);
  assert.equal(tokenizer.tokenId("<|denoise|>"), tokenizer.encode("<|denoise|>")[0]);
  assert.throws(() => tokenizer.tokenId("<|no such tag|>"), { name: "UserError", message: /^token '<\|no such tag\|>' is not/ });
});

test("a folder without a tokenizer is refused in one line", async () => {
  await assert.rejects(TextTokenizer.load(path.join(FOLDER, "no-such-folder")),
    { name: "UserError", message: /^tokenizer file .*no-such-folder\/tokenizer\.json not found; point at a built model folder$/ });
});
