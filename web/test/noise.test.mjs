// The seeded noise (src/model/noise.mjs) against tests/conformance/noise.json: PCG64's state after seeding, its
// raw outputs, numpy's float32 uniforms in order, seed + i per item, and a decode's draws in order.
import { test } from "node:test";
import assert from "node:assert/strict";

import { PCG64, RandomNoise, SeedSequence, itemNoises, seedValue } from "../src/model/noise.mjs";
import { iterativeDecode } from "../src/model/decoding.mjs";
import { UserError } from "../src/errors.mjs";
import { differences, vector } from "./vectors.mjs";

const NOISE = vector("noise");
const hex = (/** @type {bigint} */ value, /** @type {number} */ digits) => value.toString(16).padStart(digits, "0");

/** @param {string} prefix */
const casesOf = (prefix) => NOISE.cases.filter((c) => c.name.startsWith(prefix));

test("the vector has every kind of case", () => {
  assert.ok(casesOf("stream_").length >= 6);
  assert.ok(casesOf("items_").length >= 2);
  assert.ok(casesOf("draws_").length >= 3);
});

for (const c of casesOf("stream_")) {
  test(`${c.name}: PCG64 state after seeding, raw words, float32 draws`, () => {
    const rng = new PCG64(c.inputs.seed);
    assert.equal(hex(rng.state.state, 32), c.expected.pcg64_state);
    assert.equal(hex(rng.state.inc, 32), c.expected.pcg64_inc);
    assert.deepEqual([...rng.randomRaw(c.expected.raw_uint64.length)].map((v) => hex(v, 16)), c.expected.raw_uint64);

    const noise = new RandomNoise(c.inputs.seed);
    const first = noise.uniform([c.inputs.count]);
    assert.ok(first instanceof Float32Array);
    assert.deepEqual(differences(first, c.expected.float32, NOISE.tolerance), []);
    const then = noise.uniform([2, 3]);
    assert.equal(then.length, 6);
    const rows = [Array.from(then.subarray(0, 3)), Array.from(then.subarray(3))];
    assert.deepEqual(differences(rows, c.expected.then_shape_2x3, NOISE.tolerance), []);
    // float32 values come out exactly: the vector's shortest text reads back to the same float32.
    assert.deepEqual(Array.from(first), c.expected.float32.map(Math.fround));
  });
}

test("a seed past 2**53 is the same as a number, a BigInt or a decimal string", () => {
  const big = casesOf("stream_").find((c) => typeof c.inputs.seed === "string");
  assert.ok(big);
  const fromString = new RandomNoise(big.inputs.seed).uniform([5]);
  const fromBigInt = new RandomNoise(BigInt(big.inputs.seed)).uniform([5]);
  assert.deepEqual(fromBigInt, fromString);
  assert.deepEqual(new RandomNoise(1234).uniform([3]), new RandomNoise(1234n).uniform([3]));
  assert.deepEqual(new RandomNoise("1234").uniform([3]), new RandomNoise(1234).uniform([3]));
});

test("the uint32 buffer carries over between draws of odd lengths", () => {
  const c = casesOf("stream_")[0];
  const whole = new RandomNoise(c.inputs.seed).uniform([c.inputs.count + 6]);
  const pieces = new RandomNoise(c.inputs.seed);
  const joined = [...pieces.uniform([3]), ...pieces.uniform([1]), ...pieces.uniform([c.inputs.count - 4]),
    ...pieces.uniform([5]), ...pieces.uniform([1])];
  assert.deepEqual(joined, Array.from(whole));
  assert.deepEqual(differences(whole.subarray(0, c.inputs.count), c.expected.float32, NOISE.tolerance), []);
});

test("SeedSequence: words as numpy splits an integer, uint64 state as two uint32 words", () => {
  assert.deepEqual(new SeedSequence(0).pool.length, 4);
  const sequence = new SeedSequence(2n ** 64n + 5n);
  const narrow = sequence.generateState(8, "uint32");
  const wide = sequence.generateState(4, "uint64");
  for (let i = 0; i < 4; i++) {
    assert.equal(wide[i], BigInt(narrow[2 * i]) | (BigInt(narrow[2 * i + 1]) << 32n));
  }
  assert.notDeepEqual(new SeedSequence(5).pool, new SeedSequence(2n ** 64n + 5n).pool);
});

test("bad seeds are refused with a UserError", () => {
  for (const seed of [-1, 1.5, "12a", -3n, Number.MAX_SAFE_INTEGER + 2]) {
    assert.throws(() => seedValue(/** @type {any} */ (seed)), UserError);
  }
});

test("unseeded generators draw fresh entropy", () => {
  const a = new RandomNoise().uniform([16]);
  const b = new RandomNoise().uniform([16]);
  assert.notDeepEqual(a, b);
  assert.ok(a.every((v) => v >= 0 && v < 1));
  assert.equal(itemNoises(null, 3).length, 3);
});

for (const c of casesOf("items_")) {
  test(`${c.name}: item i draws from seed + first + i`, () => {
    const { seed, items, first, count } = c.inputs;
    const noises = itemNoises(seed, items, first);
    assert.equal(noises.length, items);
    const seeds = noises.map((n) => n.rng.seedSequence.entropy);
    assert.deepEqual(differences(seeds, c.expected.item_seeds, 0), []);
    assert.deepEqual(differences(noises.map((n) => n.uniform([count])), c.expected.first_values, NOISE.tolerance), []);
  });
}

/** A NoiseSource that notes each draw: its shape, first values and last, and the step it came in. */
class Recording {
  /** @param {RandomNoise} source @param {number} item @param {any[]} log @param {{step: number}} clock */
  constructor(source, item, log, clock) {
    this.source = source;
    this.item = item;
    this.log = log;
    this.clock = clock;
  }

  /** @param {number[]} shape */
  uniform(shape) {
    const values = this.source.uniform(shape);
    this.log.push({ step: this.clock.step, item: this.item, shape: [...shape], first: Array.from(values.subarray(0, 3)),
      last: values[values.length - 1] });
    return values;
  }
}

for (const c of casesOf("draws_")) {
  test(`${c.name}: a decode's draws in order`, async () => {
    const { seed, target_lens: targetLens, num_steps: numSteps, t_shift: tShift, settings } = c.inputs;
    const decoding = { numSteps, tShift, guidanceScale: 2.0, layerPenaltyFactor: 5.0,
      positionTemperature: settings.position_temperature, classTemperature: settings.class_temperature };
    const vocab = 1025;
    const log = /** @type {any[]} */ ([]);
    const clock = { step: 0 };
    const sources = itemNoises(seed, targetLens.length).map((n, i) => new Recording(n, i, log, clock));
    const longest = Math.max(...targetLens);
    const rows = 2 * targetLens.length;
    /** @type {import("../src/model/decoding.mjs").CfgBatch} */
    const batch = { inputIds: new BigInt64Array(rows * 8 * longest).fill(1024n), dims: [rows, 8, longest],
      audioMask: new Uint8Array(rows * longest).fill(1), attentionMask: new Uint8Array(rows * longest * longest).fill(1),
      condLens: [...targetLens], rows, length: longest };
    const flat = Float32Array.from({ length: vocab }, (_, v) => -1 + (2 * v) / (vocab - 1));
    const logits = (/** @type {any} */ _ids, /** @type {any} */ _batch, /** @type {number[]} */ lens) =>
      lens.map((t) => {
        const data = new Float32Array(8 * t * vocab);
        for (let row = 0; row < 8 * t; row++) data.set(flat, row * vocab);
        const one = { data, dims: [8, t, vocab] };
        return /** @type {[any, any]} */ ([one, one]);
      });
    const codes = await iterativeDecode(batch, targetLens, logits, decoding, sources, (done) => {
      clock.step = done;
    });
    assert.deepEqual(differences(log, c.expected.draws, NOISE.tolerance), []);
    assert.equal(log.length, c.expected.draws.length);
    assert.deepEqual(codes.map((code) => code.length), targetLens.map((t) => 8 * t));
    assert.ok(codes.every((code) => code.every((v) => v >= 0 && v < 1024)));
    assert.ok(batch.inputIds.every((v) => v === 1024n), "the batch is not modified");
  });
}
