/**
 * Seeded noise, bit for bit numpy's `default_rng(seed).random(shape, dtype=float32)`: SeedSequence, PCG64
 * (XSL-RR 128/64) and its float32 draws. Reproduces codes/runtime/model/decoding.py `RandomNoise` and
 * codes/runtime/request.py `item_noises`; docs/runtime.md stage 11. Vector: tests/conformance/noise.json.
 *
 * The 128-bit state lives in six 24-bit limbs held in Numbers (the top one holds 8 bits): a column of limb
 * products stays under 2**51, exact in a double, so a step costs 21 multiplications and no BigInt (a class draw
 * is millions of values a step). BigInt only seeds.
 */
import { UserError } from "../errors.mjs";

// numpy/random/bit_generator.pyx: the SeedSequence hash constants.
const INIT_A = 0x43b0d7e5;
const MULT_A = 0x931e8875;
const INIT_B = 0x8b51f9dd;
const MULT_B = 0x58f38ded;
const MIX_MULT_L = 0xca01f9dd;
const MIX_MULT_R = 0x4973f715;
const XSHIFT = 16;
const POOL_SIZE = 4;

const LIMB_BITS = 24;
const LIMBS = 6;
const LIMB = 2 ** LIMB_BITS;
const INV_LIMB = 1 / LIMB;
const MASK_128 = (1n << 128n) - 1n;
/** PCG64's multiplier 0x2360ED051FC65DA44385DF649FCCF645 in 24-bit limbs, low first. */
const [M0, M1, M2, M3, M4, M5] = Array.from({ length: LIMBS }, (_, i) =>
  Number((0x2360ed051fc65da44385df649fccf645n >> BigInt(LIMB_BITS * i)) & 0xffffffn));
const FLOAT32_UNIT = 1 / 16777216; // 2**-24: (uint32 >> 8) * 2**-24 is numpy's next_float

/**
 * A seed as a BigInt: a non-negative integer given as a number, a BigInt or a decimal string (past 2**53).
 * @param {number | bigint | string} seed
 * @returns {bigint}
 */
export function seedValue(seed) {
  if (typeof seed === "bigint" && seed >= 0n) return seed;
  if (typeof seed === "number" && Number.isSafeInteger(seed) && seed >= 0) return BigInt(seed);
  if (typeof seed === "string" && /^\s*\d+\s*$/.test(seed)) return BigInt(seed.trim());
  throw new UserError(`seed must be a non-negative integer, got ${String(seed)}`);
}

/**
 * An integer's uint32 words, least significant first, as numpy's `_int_to_uint32_array` (0 is one word).
 * @param {bigint} value
 * @returns {number[]}
 */
export function uint32Words(value) {
  const words = [];
  do {
    words.push(Number(value & 0xffffffffn));
    value >>= 32n;
  } while (value > 0n);
  return words;
}

/** Fresh entropy: 128 bits, as numpy's `randbits(128)` when no seed is given. @returns {bigint} */
function freshEntropy() {
  const words = new Uint32Array(4);
  globalThis.crypto.getRandomValues(words);
  return words.reduce((value, word, i) => value | (BigInt(word) << BigInt(32 * i)), 0n);
}

/** @param {number} value @param {{value: number}} hashConst @returns {number} */
function hashmix(value, hashConst) {
  value = (value ^ hashConst.value) >>> 0;
  hashConst.value = Math.imul(hashConst.value, MULT_A) >>> 0;
  value = Math.imul(value, hashConst.value) >>> 0;
  return (value ^ (value >>> XSHIFT)) >>> 0;
}

/** @param {number} x @param {number} y @returns {number} */
function mix(x, y) {
  const result = (Math.imul(MIX_MULT_L, x) - Math.imul(MIX_MULT_R, y)) >>> 0;
  return (result ^ (result >>> XSHIFT)) >>> 0;
}

/** numpy's SeedSequence without spawn keys: an entropy pool of four uint32 words, mixed from the seed. */
export class SeedSequence {
  /** @param {number | bigint | string | null} [entropy] null: fresh entropy */
  constructor(entropy = null) {
    this.entropy = entropy === null || entropy === undefined ? freshEntropy() : seedValue(entropy);
    this.pool = SeedSequence.mixEntropy(uint32Words(this.entropy));
  }

  /** numpy's `mix_entropy` into a fresh pool. @param {number[]} entropy @returns {Uint32Array} */
  static mixEntropy(entropy) {
    const pool = new Uint32Array(POOL_SIZE);
    const hashConst = { value: INIT_A };
    for (let i = 0; i < POOL_SIZE; i++) pool[i] = hashmix(i < entropy.length ? entropy[i] : 0, hashConst);
    for (let src = 0; src < POOL_SIZE; src++) {
      for (let dst = 0; dst < POOL_SIZE; dst++) {
        if (src !== dst) pool[dst] = mix(pool[dst], hashmix(pool[src], hashConst));
      }
    }
    for (let src = POOL_SIZE; src < entropy.length; src++) {
      for (let dst = 0; dst < POOL_SIZE; dst++) pool[dst] = mix(pool[dst], hashmix(entropy[src], hashConst));
    }
    return pool;
  }

  /**
   * `generate_state(nWords, uint32)`; uint64 words are two of these, the low one first (numpy's view).
   * @param {number} nWords
   * @param {"uint32" | "uint64"} [dtype]
   * @returns {Uint32Array | BigUint64Array}
   */
  generateState(nWords, dtype = "uint32") {
    const count = dtype === "uint64" ? 2 * nWords : nWords;
    const words = new Uint32Array(count);
    let hashConst = INIT_B;
    for (let i = 0; i < count; i++) {
      let value = (this.pool[i % POOL_SIZE] ^ hashConst) >>> 0;
      hashConst = Math.imul(hashConst, MULT_B) >>> 0;
      value = Math.imul(value, hashConst) >>> 0;
      words[i] = (value ^ (value >>> XSHIFT)) >>> 0;
    }
    if (dtype === "uint32") return words;
    const wide = new BigUint64Array(nWords);
    for (let i = 0; i < nWords; i++) wide[i] = BigInt(words[2 * i]) | (BigInt(words[2 * i + 1]) << 32n);
    return wide;
  }
}

/** @param {bigint} value @param {Float64Array} limbs six 24-bit limbs, low first */
function toLimbs(value, limbs) {
  for (let i = 0; i < LIMBS; i++) limbs[i] = Number((value >> BigInt(LIMB_BITS * i)) & 0xffffffn);
}

/** @param {Float64Array} limbs @returns {bigint} */
function fromLimbs(limbs) {
  let value = 0n;
  for (let i = LIMBS - 1; i >= 0; i--) value = (value << BigInt(LIMB_BITS)) | BigInt(limbs[i]);
  return value;
}

/** numpy's PCG64 bit generator (XSL-RR 128/64), seeded as `PCG64(SeedSequence(seed))`. */
export class PCG64 {
  /** @param {SeedSequence | number | bigint | string | null} [seed] */
  constructor(seed = null) {
    const sequence = seed instanceof SeedSequence ? seed : new SeedSequence(seed);
    const [a, b, c, d] = /** @type {BigUint64Array} */ (sequence.generateState(4, "uint64"));
    this.seedSequence = sequence;
    this.limbs = new Float64Array(LIMBS); // the state
    this.inc = new Float64Array(LIMBS);
    this.halves = new Uint32Array(2);
    this.hasUint32 = false; // numpy buffers the high half of a 64-bit output for the next uint32
    this.uinteger = 0;
    // pcg_setseq_128_srandom_r: inc = seq << 1 | 1; state = 0; step; state += initstate; step.
    toLimbs(((((c << 64n) | d) << 1n) | 1n) & MASK_128, this.inc);
    this.next64(this.halves);
    toLimbs((fromLimbs(this.limbs) + ((a << 64n) | b)) & MASK_128, this.limbs);
    this.next64(this.halves);
  }

  /** The state as numpy's `bit_generator.state["state"]` holds it. @returns {{state: bigint, inc: bigint}} */
  get state() {
    return { state: fromLimbs(this.limbs), inc: fromLimbs(this.inc) };
  }

  /** Steps once; writes the 64-bit output's uint32 halves into out[0] (low) and out[1] (high). @param {Uint32Array} out */
  next64(out) {
    this.fill(out, 0, 1, 1);
  }

  /**
   * The generator's core: `pairs` steps (state = state * M + inc mod 2**128), each output rotr64(hi ^ lo,
   * state >> 122) written from out[at] as its two uint32 halves, low first, times `scale` (1: the words;
   * 2**-24 after the shift by 8: numpy's float32 uniforms). The state sits in locals; Math.floor splits the
   * carry off each column.
   * @param {Uint32Array | Float32Array} out @param {number} at @param {number} pairs @param {number} scale
   */
  fill(out, at, pairs, scale) {
    const shift = scale === 1 ? 0 : 8;
    const state = this.limbs;
    const inc = this.inc;
    const i0 = inc[0], i1 = inc[1], i2 = inc[2], i3 = inc[3], i4 = inc[4], i5 = inc[5];
    let s0 = state[0], s1 = state[1], s2 = state[2], s3 = state[3], s4 = state[4], s5 = state[5];
    const end = at + 2 * pairs;
    for (let i = at; i < end; i += 2) {
      let t = s0 * M0 + i0;
      let c = Math.floor(t * INV_LIMB);
      const r0 = t - c * LIMB;
      t = c + s0 * M1 + s1 * M0 + i1;
      c = Math.floor(t * INV_LIMB);
      const r1 = t - c * LIMB;
      t = c + s0 * M2 + s1 * M1 + s2 * M0 + i2;
      c = Math.floor(t * INV_LIMB);
      const r2 = t - c * LIMB;
      t = c + s0 * M3 + s1 * M2 + s2 * M1 + s3 * M0 + i3;
      c = Math.floor(t * INV_LIMB);
      const r3 = t - c * LIMB;
      t = c + s0 * M4 + s1 * M3 + s2 * M2 + s3 * M1 + s4 * M0 + i4;
      c = Math.floor(t * INV_LIMB);
      const r4 = t - c * LIMB;
      t = c + s0 * M5 + s1 * M4 + s2 * M3 + s3 * M2 + s4 * M1 + s5 * M0 + i5;
      const r5 = t - Math.floor(t * (1 / 256)) * 256; // bits 120..127
      s0 = r0; s1 = r1; s2 = r2; s3 = r3; s4 = r4; s5 = r5;
      // The 32-bit words of the state, low first; `<<` keeps the low bits that fit.
      const w0 = r0 | (r1 << 24), w1 = (r1 >>> 8) | (r2 << 16), w2 = (r2 >>> 16) | (r3 << 8), w3 = r4 | (r5 << 24);
      const low = w2 ^ w0, high = w3 ^ w1;
      const rot = r5 >>> 2;
      const r = rot & 31;
      const lo = rot < 32 ? low : high;
      const hi = rot < 32 ? high : low;
      // A shift by 32 is a shift by 0 in JS: hence r === 0 on its own.
      out[i] = ((r === 0 ? lo : (lo >>> r) | (hi << (32 - r))) >>> shift) * scale;
      out[i + 1] = ((r === 0 ? hi : (hi >>> r) | (lo << (32 - r))) >>> shift) * scale;
    }
    state[0] = s0; state[1] = s1; state[2] = s2; state[3] = s3; state[4] = s4; state[5] = s5;
  }

  /** `random_raw(count)`: 64-bit outputs (leaves the uint32 buffer alone, as numpy). @param {number} count */
  randomRaw(count) {
    const words = new Uint32Array(2 * count);
    this.fill(words, 0, count, 1);
    const out = new BigUint64Array(count);
    for (let i = 0; i < count; i++) out[i] = BigInt(words[2 * i]) | (BigInt(words[2 * i + 1]) << 32n);
    return out;
  }

  /** numpy's next_uint32: the low half of a fresh 64-bit output, then at the next call its high half. */
  nextUint32() {
    if (this.hasUint32) {
      this.hasUint32 = false;
      return this.uinteger;
    }
    this.next64(this.halves);
    this.hasUint32 = true;
    this.uinteger = this.halves[1];
    return this.halves[0];
  }

  /**
   * Fills `out` with float32 uniforms in [0, 1) in order, as `random(out.length, dtype=float32)`: each value is
   * (next_uint32 >> 8) * 2**-24, so a buffered high half comes first and an odd tail leaves one buffered.
   * @param {Float32Array} out
   * @returns {Float32Array}
   */
  fillFloat32(out) {
    let i = 0;
    if (out.length > 0 && this.hasUint32) out[i++] = (this.nextUint32() >>> 8) * FLOAT32_UNIT;
    const pairs = (out.length - i) >> 1;
    this.fill(out, i, pairs, FLOAT32_UNIT);
    i += 2 * pairs;
    if (i < out.length) out[i] = (this.nextUint32() >>> 8) * FLOAT32_UNIT;
    return out;
  }

  /** `rng.random(count, dtype=float32)`. @param {number} count @returns {Float32Array} */
  random(count) {
    return this.fillFloat32(new Float32Array(count));
  }
}

/**
 * @typedef {{uniform(shape: number[]): Float32Array}} NoiseSource float32 samples in [0, 1), C order, the
 *   length of the shape's product
 */

/** The default NoiseSource: one seeded generator (seed null = fresh entropy), as decoding.py's RandomNoise. */
export class RandomNoise {
  /** @param {number | bigint | string | null} [seed] */
  constructor(seed = null) {
    this.rng = new PCG64(seed);
  }

  /** @param {number[]} shape @returns {Float32Array} */
  uniform(shape) {
    return this.rng.random(shape.reduce((count, size) => count * size, 1));
  }
}

/**
 * One generator per item (request.py item_noises): item i of a seeded run draws from seed + first + i, so its
 * noise does not depend on what shares its batch; unseeded items from fresh entropy.
 * @param {number | bigint | string | null | undefined} seed
 * @param {number} count
 * @param {number} [first]
 * @returns {RandomNoise[]}
 */
export function itemNoises(seed, count, first = 0) {
  const base = seed === null || seed === undefined ? null : seedValue(seed);
  return Array.from({ length: count }, (_, i) => new RandomNoise(base === null ? null : base + BigInt(first + i)));
}
