// The decoding host logic (src/model/decoding.mjs) against tests/conformance/schedule.json (shifted times and
// reveal counts), reveals.json (each step's reveals, ties and -inf) and cell_scores.json (the numpy scoring and
// the Gumbel transform); and the loop's own rules (no draws for an item that reveals nothing, the batch untouched).
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  cellScores, filterTopK, gumbelNoise, iterativeDecode, logSoftmax, pairwiseSum, perItem, revealSchedule, revealTopK,
  step, timeSteps,
} from "../src/model/decoding.mjs";
import { RandomNoise } from "../src/model/noise.mjs";
import { differences, vector } from "./vectors.mjs";

const SCHEDULE = vector("schedule");
const REVEALS = vector("reveals");
const CELLS = vector("cell_scores");

/** Nested lists of numbers (or "inf"/"-inf"/"nan") flattened to a Float32Array, as numpy reads them in. @param {any} values */
function float32s(values) {
  const flat = /** @type {any[]} */ ([values]).flat(Infinity);
  const special = /** @type {Record<string, number>} */ ({ inf: Infinity, "-inf": -Infinity, nan: NaN });
  return Float32Array.from(flat, (v) => (typeof v === "string" ? special[v] : v));
}

/** A flat [rows * cols] array as nested rows. @param {ArrayLike<number>} flat @param {number} cols */
function rowsOf(flat, cols) {
  const rows = [];
  for (let at = 0; at < flat.length; at += cols) rows.push(Array.from(flat).slice(at, at + cols));
  return rows;
}

for (const c of SCHEDULE.cases) {
  test(`schedule ${c.name}: float32 times bit for bit, reveal counts`, () => {
    const { target_len: targetLen, num_steps: numSteps, t_shift: tShift } = c.inputs;
    const times = timeSteps(numSteps, tShift);
    assert.ok(times instanceof Float32Array);
    assert.deepEqual(Array.from(times), c.expected.time_steps.map(Math.fround));
    const counts = revealSchedule(targetLen, numSteps, tShift);
    assert.deepEqual(counts, c.expected.reveal_counts);
    assert.equal(counts.reduce((a, b) => a + b, 0), 8 * targetLen);
  });
}

for (const c of REVEALS.cases) {
  test(`reveals ${c.name}: the best still-masked cells, ties to the lower flat index`, () => {
    const { target_lens: targetLens, reveal_counts: revealCounts, steps } = c.inputs;
    const tokens = targetLens.map((/** @type {number} */ t) => new Int32Array(8 * t).fill(1024));
    steps.forEach((/** @type {any[]} */ cells, /** @type {number} */ stepIndex) => {
      cells.forEach((cell, item) => {
        const count = revealCounts[item][stepIndex];
        if (count > 0) {
          const predicted = Int32Array.from(cell.predicted.flat());
          tokens[item] = revealTopK(tokens[item], predicted, float32s(cell.scores), count);
        }
      });
      const after = tokens.map((t, item) => rowsOf(t, targetLens[item]));
      assert.deepEqual(differences(after, c.expected.tokens_after_step[stepIndex], 0), [], `step ${stepIndex}`);
    });
  });
}

test("revealTopK: -inf cells and revealed cells tie, the lower flat index first; NaN last", () => {
  const tokens = Int32Array.from([5, 1024, 1024, 1024]);
  const scores = Float32Array.from([9, -Infinity, NaN, 1]);
  const predicted = Int32Array.from([70, 71, 72, 73]);
  assert.deepEqual(Array.from(revealTopK(tokens, predicted, scores, 1)), [5, 1024, 1024, 73]);
  // next: -inf for the revealed cell 0 and the open cell 1: cell 0 is first and takes its prediction again
  assert.deepEqual(Array.from(revealTopK(tokens, predicted, scores, 2)), [70, 1024, 1024, 73]);
  assert.deepEqual(Array.from(revealTopK(tokens, predicted, scores, 4)), [70, 71, 72, 73]);
  assert.deepEqual(Array.from(revealTopK(tokens, BigInt64Array.from([1n, 2n, 3n, 4n]), scores, 1)), [5, 1024, 1024, 4]);
});

const cellCases = CELLS.cases.filter((c) => "settings" in c.inputs);

for (const c of cellCases) {
  test(`cell_scores ${c.name}: tokens exact, scores within the tolerance`, () => {
    const { settings, mask_id: maskId, noise_seed: seed, cond_logits: cond, uncond_logits: uncond } = c.inputs;
    const dims = [cond.length, cond[0].length, cond[0][0].length];
    const decoding = { guidanceScale: settings.guidance_scale, layerPenaltyFactor: settings.layer_penalty_factor,
      positionTemperature: settings.position_temperature, classTemperature: settings.class_temperature };
    const { tokens, scores } = cellScores({ data: float32s(cond), dims }, { data: float32s(uncond), dims },
      /** @type {any} */ (decoding), new RandomNoise(seed), maskId);
    assert.deepEqual(differences(rowsOf(tokens, dims[1]), c.expected.predicted, 0), []);
    assert.deepEqual(differences(rowsOf(scores, dims[1]), c.expected.scores, CELLS.tolerance), []);
    assert.ok(Array.from(tokens).every((t) => t !== maskId), "MASK is never predicted");
  });
}

test("cell_scores: bare logits take the vocabulary from the MASK id", () => {
  const c = cellCases[0];
  const { settings, mask_id: maskId, noise_seed: seed, cond_logits: cond, uncond_logits: uncond } = c.inputs;
  const decoding = /** @type {any} */ ({ guidanceScale: settings.guidance_scale, layerPenaltyFactor:
    settings.layer_penalty_factor, positionTemperature: settings.position_temperature,
    classTemperature: settings.class_temperature });
  const { tokens, scores } = cellScores(float32s(cond), float32s(uncond), decoding, new RandomNoise(seed), maskId);
  assert.deepEqual(differences(rowsOf(tokens, cond[0].length), c.expected.predicted, 0), []);
  assert.deepEqual(differences(rowsOf(scores, cond[0].length), c.expected.scores, CELLS.tolerance), []);
});

for (const c of CELLS.cases.filter((c) => "uniform" in c.inputs)) {
  test(`cell_scores ${c.name}: the Gumbel transform in float32`, () => {
    const values = gumbelNoise(float32s(c.inputs.uniform));
    assert.deepEqual(differences(values, c.expected.gumbel, CELLS.tolerance), []);
  });
}

test("pairwiseSum follows numpy's blocks: the same as a plain float32 sum under 8, pairwise past 128", () => {
  const small = Float32Array.from([0.1, 0.2, 0.3, 1e8, -1e8]);
  let plain = 0;
  for (const v of small) plain = Math.fround(plain + v);
  assert.equal(pairwiseSum(small, 0, small.length), plain);
  const big = new Float32Array(1025).fill(0.1);
  const sum = pairwiseSum(big, 0, big.length);
  assert.ok(Math.abs(sum - 102.5) < 1e-4, `pairwise keeps the error small: ${sum}`);
});

test("logSoftmax rows sum to one; filterTopK keeps ceil(10%) of each row, ties at the cut-off too", () => {
  const logits = Float32Array.from({ length: 2 * 17 }, (_, i) => Math.sin(i) * 3);
  const lp = logSoftmax(logits, 17);
  for (let row = 0; row < 2; row++) {
    const total = lp.subarray(row * 17, (row + 1) * 17).reduce((a, v) => a + Math.exp(v), 0);
    assert.ok(Math.abs(total - 1) < 1e-5);
  }
  const kept = filterTopK(lp, 17);
  for (let row = 0; row < 2; row++) {
    assert.equal(kept.subarray(row * 17, (row + 1) * 17).filter((v) => v > -Infinity).length, Math.ceil(0.1 * 17));
  }
  const ties = filterTopK(Float32Array.from([1, 3, 3, 3, 0, 0, 0, 0, 0, 0, 0]), 11);
  assert.deepEqual(Array.from(ties).map((v) => v > -Infinity), [false, true, true, true, false, false, false, false,
    false, false, false]);
});

test("step = cellScores + revealTopK; perItem repeats one settings object or keeps a list", () => {
  const c = cellCases[1];
  const { settings, mask_id: maskId, cond_logits: cond, uncond_logits: uncond } = c.inputs;
  const dims = [cond.length, cond[0].length, cond[0][0].length];
  const decoding = /** @type {any} */ ({ guidanceScale: settings.guidance_scale, layerPenaltyFactor:
    settings.layer_penalty_factor, positionTemperature: 0, classTemperature: 0 });
  const open = new Int32Array(dims[0] * dims[1]).fill(maskId);
  const next = step(open, { data: float32s(cond), dims }, { data: float32s(uncond), dims }, 3, decoding,
    new RandomNoise(1), maskId);
  const revealed = Array.from(next).map((v, i) => [v, i]).filter(([v]) => v !== maskId);
  assert.equal(revealed.length, 3);
  const predicted = c.expected.predicted.flat();
  for (const [v, i] of revealed) assert.equal(v, predicted[i]);
  assert.deepEqual(perItem(decoding, 3), [decoding, decoding, decoding]);
  assert.deepEqual(perItem([1, 2], 2), [1, 2]);
});

test("iterativeDecode: items that reveal nothing are not scored; ids land in both rows; the batch is untouched", async () => {
  const targetLens = [1, 3];
  const numSteps = 4;
  const schedules = targetLens.map((t) => revealSchedule(t, numSteps, 0.1));
  const condLens = [5, 6];
  const S = 6;
  const rows = 4;
  const inputIds = new BigInt64Array(rows * 8 * S).fill(7n);
  /** @type {import("../src/model/decoding.mjs").CfgBatch} */
  const batch = { inputIds, dims: [rows, 8, S], audioMask: new Uint8Array(rows * S), attentionMask: new Uint8Array(0),
    condLens, rows, length: S };
  const seen = /** @type {boolean[][]} */ ([]);
  /** @type {import("../src/model/decoding.mjs").ScoreFn} */
  const scoreFn = (ids, _batch, lens, noises) => {
    assert.notEqual(ids, inputIds);
    seen.push(noises.map((n) => n !== null));
    return lens.map((t, item) => (noises[item] === null ? null : {
      tokens: Int32Array.from({ length: 8 * t }, (_, i) => 100 * item + i),
      scores: Float32Array.from({ length: 8 * t }, (_, i) => -i) }));
  };
  const steps = /** @type {number[]} */ ([]);
  const codes = await iterativeDecode(batch, targetLens, null, /** @type {any} */ ({ numSteps, tShift: 0.1 }),
    null, (done, total) => { steps.push(done); assert.equal(total, numSteps); }, 1024, scoreFn);
  assert.deepEqual(steps, [1, 2, 3, 4]);
  assert.deepEqual(seen, Array.from({ length: numSteps }, (_, k) => schedules.map((s) => s[k] > 0)));
  assert.deepEqual(Array.from(codes[0]), Array.from({ length: 8 }, (_, i) => i));
  assert.deepEqual(Array.from(codes[1]), Array.from({ length: 24 }, (_, i) => 100 + i));
  assert.ok(inputIds.every((v) => v === 7n));
});

test("iterativeDecode through target logits: the same tokens as cellScores, step by step", async () => {
  const c = cellCases[1]; // no noise: the greedy scoring
  const { settings, mask_id: maskId, cond_logits: cond, uncond_logits: uncond } = c.inputs;
  const dims = [cond.length, cond[0].length, cond[0][0].length];
  const T = dims[1];
  const decoding = /** @type {any} */ ({ numSteps: 3, tShift: 0.1, guidanceScale: settings.guidance_scale,
    layerPenaltyFactor: settings.layer_penalty_factor, positionTemperature: 0, classTemperature: 0 });
  /** @type {import("../src/model/decoding.mjs").CfgBatch} */
  const batch = { inputIds: new BigInt64Array(2 * 8 * T).fill(1024n), dims: [2, 8, T], audioMask: new Uint8Array(2 * T),
    attentionMask: new Uint8Array(0), condLens: [T], rows: 2, length: T };
  const rowsSeen = /** @type {bigint[][]} */ ([]);
  const logits = (/** @type {BigInt64Array} */ ids) => {
    rowsSeen.push([...ids.subarray(0, 8 * T)], [...ids.subarray(8 * T)]);
    return [/** @type {[any, any]} */ ([{ data: float32s(cond), dims }, { data: float32s(uncond), dims }])];
  };
  const [codes] = await iterativeDecode(batch, [T], logits, decoding, new RandomNoise(0), null, maskId);
  assert.deepEqual(differences(rowsOf(codes, T), c.expected.predicted, 0), []);
  // what the model saw at the last step: both rows hold the same tokens
  assert.deepEqual(rowsSeen[rowsSeen.length - 2], rowsSeen[rowsSeen.length - 1]);
});
