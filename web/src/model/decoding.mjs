/**
 * Iterative masked decoding: codes/runtime/model/decoding.py, function by function (upstream's
 * `_generate_iterative` maths); docs/runtime.md stages 8 (scoring the cells), 9 (the schedule), 10 (the reveal)
 * and 11 (the draw order). Vectors: tests/conformance/schedule.json, reveals.json, cell_scores.json, noise.json.
 *
 * Arrays are flat typed arrays in C order: logits [8, T, V], tokens and scores [8, T] (codebook-major: index =
 * codebook * T + position). The numpy reference runs in float32: every operation rounds through Math.fround where
 * numpy's float32 op rounds, and sums follow numpy's pairwise summation, so a result differs from numpy's only
 * where numpy's exp and log (vectorised, CPU-dependent) round otherwise: within the vector's tolerance.
 */
import { RandomNoise } from "./noise.mjs";

/** @typedef {import("./noise.mjs").NoiseSource} NoiseSource */
/**
 * @typedef {Float32Array | {data: Float32Array, dims: readonly number[]}} Logits one item's target logits
 *   [8, T, V]: with its dims (an onnxruntime Tensor has them), or bare, where V is the MASK id + 1 (MASK is the
 *   vocabulary's last id) and there are 8 codebooks
 */
/** @typedef {[Logits, Logits]} LogitsPair an item's (conditional, unconditional) target logits */
/**
 * @typedef {{tokens: Int32Array, scores: Float32Array}} CellScores an item's predicted token and
 *   score per cell, [8, T] each
 */
/**
 * @typedef {{numSteps: number, guidanceScale: number, tShift: number, layerPenaltyFactor: number,
 *   positionTemperature: number, classTemperature: number}} DecodingSettings the GenerationSettings this module reads
 */
/**
 * @typedef {import("../voices/prompt.mjs").CfgBatch} CfgBatch the CFG batch (voices/prompt.mjs); this loop reads
 *   its inputIds [2B, 8, S] (conditional rows, then unconditional), dims and condLens
 */
/**
 * @typedef {(inputIds: BigInt64Array, batch: CfgBatch, targetLens: number[]) =>
 *   LogitsPair[] | Promise<LogitsPair[]>} TargetLogitsFn the model: each item's target logits for these input ids
 */
/**
 * @typedef {(inputIds: BigInt64Array, batch: CfgBatch, targetLens: number[],
 *   noises: (NoiseSource | null)[]) => (CellScores | null)[] | Promise<(CellScores | null)[]>} ScoreFn the model
 *   and the scoring: each item's CellScores, null where its noise is null (it reveals nothing this step)
 */

import { AUDIO_MASK_ID, NUM_CODEBOOKS } from "../contract/specs.mjs";

export const TOP_K_RATIO = 0.1; // class sampling keeps this share of the vocabulary
const GUMBEL_EPS = Math.fround(1e-10);
const f32 = Math.fround;

/**
 * Logits' values and dims [8, T, V].
 * @param {Logits} logits @param {number} maskId
 * @returns {{data: Float32Array, dims: number[]}}
 */
function shaped(logits, maskId) {
  if (!(logits instanceof Float32Array)) return { data: logits.data, dims: [...logits.dims] };
  const vocab = maskId + 1;
  return { data: logits, dims: [NUM_CODEBOOKS, logits.length / (NUM_CODEBOOKS * vocab), vocab] };
}

/**
 * numpy's float32 sum of a[start, start + n): pairwise, 8 accumulators in blocks of up to 128 (loops_utils.h).
 * @param {Float32Array} a @param {number} start @param {number} n
 * @returns {number}
 */
export function pairwiseSum(a, start, n) {
  if (n < 8) {
    let sum = 0;
    for (let i = 0; i < n; i++) sum = f32(sum + a[start + i]);
    return sum;
  }
  if (n <= 128) {
    let r0 = a[start], r1 = a[start + 1], r2 = a[start + 2], r3 = a[start + 3];
    let r4 = a[start + 4], r5 = a[start + 5], r6 = a[start + 6], r7 = a[start + 7];
    const whole = n - (n % 8);
    let i = 8;
    for (; i < whole; i += 8) {
      const at = start + i;
      r0 = f32(r0 + a[at]); r1 = f32(r1 + a[at + 1]); r2 = f32(r2 + a[at + 2]); r3 = f32(r3 + a[at + 3]);
      r4 = f32(r4 + a[at + 4]); r5 = f32(r5 + a[at + 5]); r6 = f32(r6 + a[at + 6]); r7 = f32(r7 + a[at + 7]);
    }
    let sum = f32(f32(f32(r0 + r1) + f32(r2 + r3)) + f32(f32(r4 + r5) + f32(r6 + r7)));
    for (; i < n; i++) sum = f32(sum + a[start + i]);
    return sum;
  }
  let half = Math.floor(n / 2);
  half -= half % 8;
  return f32(pairwiseSum(a, start, half) + pairwiseSum(a, start + half, n - half));
}

/**
 * The num_steps + 1 shifted times from 0 to 1 (float32), bit-equal to upstream's `_get_time_steps`: torch's
 * CPU linspace (step 1/n in float32, the first half counting up from 0, the second down from 1, each value
 * rounded once), then shift * t / (1 + (shift - 1) * t) in float32.
 * @param {number} numSteps @param {number} tShift
 * @returns {Float32Array}
 */
export function timeSteps(numSteps, tShift) {
  const step = f32(1 / numSteps);
  const shift = f32(tShift);
  const slope = f32(tShift - 1);
  const times = new Float32Array(numSteps + 1);
  for (let i = 0; i <= numSteps; i++) {
    const grid = f32(i < Math.floor((numSteps + 1) / 2) ? step * i : 1 - step * (numSteps - i));
    times[i] = f32(f32(shift * grid) / f32(1 + f32(slope * grid)));
  }
  return times;
}

/**
 * How many target cells each step reveals; the counts sum to targetLen * numCodebooks.
 * @param {number} targetLen @param {number} numSteps @param {number} tShift @param {number} [numCodebooks]
 * @returns {number[]}
 */
export function revealSchedule(targetLen, numSteps, tShift, numCodebooks = 8) {
  const times = timeSteps(numSteps, tShift);
  const totalCells = targetLen * numCodebooks;
  let remaining = totalCells;
  const counts = [];
  for (let step = 0; step < numSteps; step++) {
    const revealCount = step === numSteps - 1
      ? remaining
      : Math.min(Math.ceil(totalCells * (times[step + 1] - times[step])), remaining);
    counts.push(revealCount);
    remaining -= revealCount;
  }
  return counts;
}

/**
 * log_softmax over the last axis (rows of `vocab`), in float32 as numpy computes it.
 * @param {Float32Array} logits @param {number} vocab
 * @param {Float32Array} [out] may be `logits` itself
 * @returns {Float32Array}
 */
export function logSoftmax(logits, vocab, out = new Float32Array(logits.length)) {
  const exps = new Float32Array(vocab);
  for (let start = 0; start < logits.length; start += vocab) {
    let max = -Infinity;
    for (let v = 0; v < vocab; v++) {
      const value = logits[start + v];
      if (value > max || value !== value) max = value;
      if (value !== value) break;
    }
    for (let v = 0; v < vocab; v++) exps[v] = Math.exp(f32(logits[start + v] - max));
    const logSum = f32(Math.log(pairwiseSum(exps, 0, vocab)));
    for (let v = 0; v < vocab; v++) out[start + v] = f32(f32(logits[start + v] - max) - logSum);
  }
  return out;
}

/**
 * Classifier-free guided log-probs over the vocabulary; MASK can never be predicted.
 * @param {Logits} condLogits @param {Logits} uncondLogits @param {number} guidanceScale @param {number} [maskId]
 * @returns {Float32Array} [8, T, V]
 */
export function guidedLogProbs(condLogits, uncondLogits, guidanceScale, maskId = AUDIO_MASK_ID) {
  const { data: condData, dims } = shaped(condLogits, maskId);
  const vocab = dims[dims.length - 1];
  const cond = logSoftmax(condData, vocab);
  let logProbs = cond;
  if (guidanceScale !== 0) {
    const uncond = logSoftmax(shaped(uncondLogits, maskId).data, vocab);
    const scale = f32(guidanceScale);
    const guided = uncond; // reused in place: each value is read once before it is overwritten
    for (let i = 0; i < cond.length; i++) guided[i] = f32(cond[i] + f32(scale * f32(cond[i] - uncond[i])));
    logProbs = logSoftmax(guided, vocab, guided);
  }
  for (let start = 0; start < logProbs.length; start += vocab) logProbs[start + maskId] = -Infinity;
  return logProbs;
}

/**
 * The k-th largest value of row[0, n) (k from 1), as np.partition finds it; `row` is reordered.
 * @param {Float32Array} row @param {number} n @param {number} k
 * @returns {number}
 */
function kthLargest(row, n, k) {
  const target = n - k; // its index in ascending order
  let lo = 0, hi = n - 1;
  while (hi > lo) {
    const pivot = row[(lo + hi) >>> 1];
    let i = lo, j = hi;
    while (i <= j) {
      while (row[i] < pivot) i++;
      while (row[j] > pivot) j--;
      if (i <= j) {
        const swap = row[i];
        row[i] = row[j];
        row[j] = swap;
        i++;
        j--;
      }
    }
    if (target <= j) hi = j;
    else if (target >= i) lo = i;
    else break;
  }
  return row[target];
}

/**
 * The cut-off of each row: its ceil(ratio * vocab)-th largest value.
 * @param {Float32Array} logProbs @param {number} vocab @param {number} [ratio]
 * @returns {Float32Array} one value per row
 */
function topKCutoffs(logProbs, vocab, ratio = TOP_K_RATIO) {
  const keep = Math.ceil(ratio * vocab);
  const rows = logProbs.length / vocab;
  const cutoffs = new Float32Array(rows);
  const scratch = new Float32Array(vocab);
  for (let row = 0; row < rows; row++) {
    scratch.set(logProbs.subarray(row * vocab, (row + 1) * vocab));
    cutoffs[row] = kthLargest(scratch, vocab, keep);
  }
  return cutoffs;
}

/**
 * Keep the ceil(ratio * vocab) largest values of each row (every value equal to the cut-off too), the rest -inf.
 * @param {Float32Array} logProbs @param {number} vocab @param {number} [ratio]
 * @returns {Float32Array}
 */
export function filterTopK(logProbs, vocab, ratio = TOP_K_RATIO) {
  const cutoffs = topKCutoffs(logProbs, vocab, ratio);
  const kept = new Float32Array(logProbs.length);
  for (let i = 0; i < logProbs.length; i++) {
    kept[i] = logProbs[i] >= cutoffs[Math.floor(i / vocab)] ? logProbs[i] : -Infinity;
  }
  return kept;
}

/** One Gumbel(0, 1) sample from a float32 uniform, with upstream's 1e-10 guards, in float32. @param {number} u */
function gumbel(u) {
  return -f32(Math.log(f32(-f32(Math.log(f32(u + GUMBEL_EPS))) + GUMBEL_EPS)));
}

/**
 * Gumbel(0, 1) samples from U[0, 1) samples: -log(-log(u + 1e-10) + 1e-10) in float32.
 * @param {ArrayLike<number>} uniform
 * @returns {Float32Array}
 */
export function gumbelNoise(uniform) {
  const out = new Float32Array(uniform.length);
  for (let i = 0; i < uniform.length; i++) out[i] = gumbel(f32(uniform[i]));
  return out;
}

/**
 * A token per cell [8, T]: argmax (the first on ties), or Gumbel-max sampling among the top 10% when
 * classTemperature > 0 (one draw over [8, T, V]).
 * @param {Float32Array} logProbs [8, T, V] @param {readonly number[]} dims [8, T, V]
 * @param {number} classTemperature @param {NoiseSource} noise
 * @returns {Int32Array}
 */
export function predictTokens(logProbs, dims, classTemperature, noise) {
  const vocab = dims[dims.length - 1];
  const rows = logProbs.length / vocab;
  const tokens = new Int32Array(rows);
  if (classTemperature > 0) {
    const cutoffs = topKCutoffs(logProbs, vocab);
    const uniform = noise.uniform([...dims]);
    const temperature = f32(classTemperature);
    for (let row = 0; row < rows; row++) {
      const start = row * vocab;
      const cutoff = cutoffs[row];
      let best = -Infinity, index = 0;
      for (let v = 0; v < vocab; v++) {
        const value = logProbs[start + v];
        // A value under the cut-off (or NaN) is -inf: plus finite noise it can never win.
        if (!(value >= cutoff)) continue;
        const perturbed = f32(f32(value / temperature) + gumbel(uniform[start + v]));
        if (perturbed !== perturbed) {
          index = v;
          break;
        }
        if (perturbed > best) {
          best = perturbed;
          index = v;
        }
      }
      tokens[row] = index;
    }
    return tokens;
  }
  for (let row = 0; row < rows; row++) tokens[row] = argmaxRow(logProbs, row * vocab, vocab);
  return tokens;
}

/** numpy's argmax of one row: the first maximum, or the first NaN. @param {Float32Array} a @param {number} start @param {number} n */
function argmaxRow(a, start, n) {
  let best = a[start], index = 0;
  if (best !== best) return 0;
  for (let v = 1; v < n; v++) {
    const value = a[start + v];
    if (value !== value) return v;
    if (value > best) {
      best = value;
      index = v;
    }
  }
  return index;
}

/**
 * How much each cell [8, T] wants to be revealed now: confidence (the best log-prob) minus layerPenaltyFactor
 * per codebook index, so coarse codebooks go first; with positionTemperature > 0 the score is divided by it and
 * Gumbel noise added (one draw over [8, T]).
 * @param {Float32Array} logProbs @param {readonly number[]} dims [8, T, V]
 * @param {number} layerPenaltyFactor @param {number} positionTemperature @param {NoiseSource} noise
 * @returns {Float32Array}
 */
export function scoreCells(logProbs, dims, layerPenaltyFactor, positionTemperature, noise) {
  const [codebooks, frames, vocab] = dims;
  const scores = new Float32Array(codebooks * frames);
  const penalty = f32(layerPenaltyFactor);
  for (let cell = 0; cell < scores.length; cell++) {
    const start = cell * vocab;
    let confidence = logProbs[start];
    for (let v = 1; v < vocab && confidence === confidence; v++) {
      const value = logProbs[start + v];
      if (value > confidence || value !== value) confidence = value;
    }
    scores[cell] = f32(confidence - f32(Math.floor(cell / frames) * penalty));
  }
  if (positionTemperature > 0) {
    const uniform = noise.uniform([codebooks, frames]);
    const temperature = f32(positionTemperature);
    for (let cell = 0; cell < scores.length; cell++) {
      scores[cell] = f32(f32(scores[cell] / temperature) + gumbel(uniform[cell]));
    }
  }
  return scores;
}

/**
 * New tokens [8, T]: the `revealCount` best-scoring still-masked cells take their predicted token. Cells already
 * revealed score -inf; the order is descending by score, stable over the flat index (equal scores: the lower
 * index first; NaN last), as numpy's stable argsort of the negated scores.
 * @param {ArrayLike<number>} tokens @param {ArrayLike<number | bigint>} predicted @param {ArrayLike<number>} scores
 * @param {number} revealCount @param {number} [maskId]
 * @returns {Int32Array}
 */
export function revealTopK(tokens, predicted, scores, revealCount, maskId = AUDIO_MASK_ID) {
  const count = tokens.length;
  const open = new Float64Array(count);
  for (let i = 0; i < count; i++) open[i] = tokens[i] === maskId ? scores[i] : -Infinity;
  const order = new Int32Array(count);
  for (let i = 0; i < count; i++) order[i] = i;
  order.sort((a, b) => {
    const x = open[a], y = open[b];
    if (x > y) return -1;
    if (x < y) return 1;
    const xNaN = x !== x, yNaN = y !== y;
    if (xNaN !== yNaN) return xNaN ? 1 : -1;
    return a - b;
  });
  const revealed = Int32Array.from(tokens);
  for (let i = 0; i < Math.min(revealCount, count); i++) revealed[order[i]] = Number(predicted[order[i]]);
  return revealed;
}

/**
 * One item's target logits [8, T, V] (both rows) -> its predicted token and score per cell: the numpy reference
 * of the cell-scoring graphs; draws come in upstream's order (class, then position).
 * @param {Logits} condLogits @param {Logits} uncondLogits @param {DecodingSettings} settings
 * @param {NoiseSource} noise @param {number} [maskId]
 * @returns {CellScores}
 */
export function cellScores(condLogits, uncondLogits, settings, noise, maskId = AUDIO_MASK_ID) {
  const { dims } = shaped(condLogits, maskId);
  const logProbs = guidedLogProbs(condLogits, uncondLogits, settings.guidanceScale, maskId);
  const tokens = predictTokens(logProbs, dims, settings.classTemperature, noise);
  const scores = scoreCells(logProbs, dims, settings.layerPenaltyFactor, settings.positionTemperature, noise);
  return { tokens, scores };
}

/**
 * One decoding step for one item: its target logits [8, T, V] (both rows) -> its new tokens [8, T].
 * @param {Int32Array} tokens @param {Logits} condLogits @param {Logits} uncondLogits @param {number} revealCount
 * @param {DecodingSettings} settings @param {NoiseSource} noise @param {number} [maskId]
 * @returns {Int32Array}
 */
export function step(tokens, condLogits, uncondLogits, revealCount, settings, noise, maskId = AUDIO_MASK_ID) {
  const scored = cellScores(condLogits, uncondLogits, settings, noise, maskId);
  return revealTopK(tokens, scored.tokens, scored.scores, revealCount, maskId);
}

/**
 * One settings object per item: the same for all, or each item's own.
 * @template T
 * @param {T | readonly T[]} settings @param {number} count
 * @returns {T[]}
 */
export function perItem(settings, count) {
  return Array.isArray(settings) ? [...settings] : Array.from({ length: count }, () => /** @type {T} */ (settings));
}

/**
 * A ScoreFn that scores each item's target logits on the host: the reference path.
 * @param {TargetLogitsFn} targetLogitsFn
 * @param {DecodingSettings | readonly DecodingSettings[]} settings
 * @param {number} [maskId]
 * @returns {ScoreFn}
 */
export function numpyScores(targetLogitsFn, settings, maskId = AUDIO_MASK_ID) {
  return async (inputIds, batch, targetLens, noises) => {
    const logits = await targetLogitsFn(inputIds, batch, targetLens);
    const itemSettings = perItem(settings, targetLens.length);
    return logits.map(([cond, uncond], item) => {
      const noise = noises[item];
      return noise === null ? null : cellScores(cond, uncond, itemSettings[item], noise, maskId);
    });
  };
}

/**
 * Runs all `settings.numSteps` steps; returns each item's codes [8, targetLen] (values 0..1023).
 *
 * The model scores cells through `scoreFn` (the cell-scoring graphs), or else through `targetLogitsFn` with the
 * host maths. `noise` is one source shared in upstream's order (per step, per item), or one per item, so that
 * an item's codes do not depend on what else shares its batch. `batch` is not modified. `onStep(step, numSteps)`
 * is called (and awaited) after each step.
 * @param {CfgBatch} batch
 * @param {number[]} targetLens
 * @param {TargetLogitsFn | null} targetLogitsFn
 * @param {DecodingSettings} settings
 * @param {NoiseSource | NoiseSource[] | null} [noise] null: one fresh-entropy source shared
 * @param {((step: number, numSteps: number) => unknown) | null} [onStep]
 * @param {number} [maskId]
 * @param {ScoreFn | null} [scoreFn]
 * @returns {Promise<Int32Array[]>}
 */
export async function iterativeDecode(batch, targetLens, targetLogitsFn, settings, noise = null, onStep = null,
  maskId = AUDIO_MASK_ID, scoreFn = null) {
  const numItems = targetLens.length;
  const source = noise ?? new RandomNoise();
  const noises = Array.isArray(source) ? [...source] : Array.from({ length: numItems }, () => source);
  if (noises.length !== numItems) throw new Error(`${noises.length} noise sources for ${numItems} items`);
  if (scoreFn === null) {
    if (targetLogitsFn === null) throw new Error("iterativeDecode needs a targetLogitsFn or a scoreFn");
    scoreFn = numpyScores(targetLogitsFn, settings, maskId);
  }
  const inputIds = batch.inputIds.slice();
  const [, numCodebooks, length] = batch.dims;
  const schedules = targetLens.map((t) => revealSchedule(t, settings.numSteps, settings.tShift, numCodebooks));
  /** @type {Int32Array[]} */
  const tokens = targetLens.map((t) => new Int32Array(numCodebooks * t).fill(maskId));

  /** Writes an item's tokens into one row of the batch at [offset, offset + T). */
  const writeRow = (/** @type {number} */ row, /** @type {number} */ offset, /** @type {Int32Array} */ itemTokens,
    /** @type {number} */ frames) => {
    for (let k = 0; k < numCodebooks; k++) {
      const at = (row * numCodebooks + k) * length + offset;
      for (let t = 0; t < frames; t++) inputIds[at + t] = BigInt(itemTokens[k * frames + t]);
    }
  };

  for (let stepIndex = 0; stepIndex < settings.numSteps; stepIndex++) {
    const revealCounts = schedules.map((schedule) => schedule[stepIndex]);
    // An item with nothing to reveal draws no noise either, as upstream.
    const scored = await scoreFn(inputIds, batch, targetLens, noises.map((n, i) => (revealCounts[i] > 0 ? n : null)));
    for (let item = 0; item < numItems; item++) {
      if (revealCounts[item] <= 0) continue;
      const cells = /** @type {CellScores} */ (scored[item]);
      const targetLen = targetLens[item];
      tokens[item] = revealTopK(tokens[item], cells.tokens, cells.scores, revealCounts[item], maskId);
      writeRow(item, batch.condLens[item] - targetLen, tokens[item], targetLen);
      writeRow(numItems + item, 0, tokens[item], targetLen);
    }
    if (onStep) await onStep(stepIndex + 1, settings.numSteps);
  }
  return tokens;
}
