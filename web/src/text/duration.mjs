/**
 * How many audio frames to generate for a text, upstream's rule-based estimate: codes/runtime/text/duration.py,
 * docs/runtime.md stage 3 (upstream's RuleDurationEstimator and `OmniVoice._estimate_target_tokens`).
 *
 * Each character has a phonetic weight by script (codes/runtime/data/duration_weights.json). The reference (or
 * "Nice to meet you." = 25 frames without one) gives the speaking rate in weight per frame; the target's weight
 * over that rate is its length, lifted along a power curve below 50 frames.
 */
import { FRAME_RATE } from "../contract/specs.mjs";
import { dataFile } from "../data.mjs";

const TABLE = await dataFile("duration_weights");
/** @type {Record<string, number>} */
export const SCRIPT_WEIGHTS = TABLE.weights;
// (last code point of a block, script), ascending: a binary search finds a character's block.
/** @type {number[]} */
const BLOCK_ENDS = TABLE.ranges.map((/** @type {[number, string]} */ range) => range[0]);
/** @type {string[]} */
const BLOCK_SCRIPTS = TABLE.ranges.map((/** @type {[number, string]} */ range) => range[1]);

export { FRAME_RATE };
export const FALLBACK_REF_TEXT = "Nice to meet you.";
export const FALLBACK_REF_FRAMES = 25;
const SHORT_FRAMES = 50; // below this many frames, the estimate is lifted
const BOOST_STRENGTH = 3.0;
const ARABIC_TATWEEL = 0x0640; // a stretching mark, not a sound

// Python's unicodedata.category, by its first letter.
const MARK = /^\p{M}$/u;
const PUNCTUATION_OR_SYMBOL = /^[\p{P}\p{S}]$/u;
const SEPARATOR = /^\p{Z}$/u;
const NUMBER = /^\p{N}$/u;

/** @type {Map<string, number>} */
const weights = new Map();

/** The first index whose block ends at or after `code` (Python's bisect_left). @param {number} code */
function blockOf(code) {
  let low = 0;
  let high = BLOCK_ENDS.length;
  while (low < high) {
    const middle = (low + high) >> 1;
    if (BLOCK_ENDS[middle] < code) low = middle + 1;
    else high = middle;
  }
  return low;
}

/** @param {string} char one code point */
function weighChar(char) {
  const code = /** @type {number} */ (char.codePointAt(0));
  if ((code >= 65 && code <= 90) || (code >= 97 && code <= 122)) return SCRIPT_WEIGHTS.latin;
  if (code === 32) return SCRIPT_WEIGHTS.space;
  if (code === ARABIC_TATWEEL) return SCRIPT_WEIGHTS.mark;
  if (MARK.test(char)) return SCRIPT_WEIGHTS.mark;
  if (PUNCTUATION_OR_SYMBOL.test(char)) return SCRIPT_WEIGHTS.punctuation;
  if (SEPARATOR.test(char)) return SCRIPT_WEIGHTS.space;
  if (NUMBER.test(char)) return SCRIPT_WEIGHTS.digit;
  const block = blockOf(code);
  if (block < BLOCK_ENDS.length) return SCRIPT_WEIGHTS[BLOCK_SCRIPTS[block]] ?? SCRIPT_WEIGHTS.default;
  if (code > 0x20000) return SCRIPT_WEIGHTS.cjk; // CJK extensions B and later
  return SCRIPT_WEIGHTS.default;
}

/** Speaking time of one character (code point) relative to a Latin letter. @param {string} char */
export function charWeight(char) {
  let weight = weights.get(char);
  if (weight === undefined) {
    weight = weighChar(char);
    if (weights.size < 4096) weights.set(char, weight);
  }
  return weight;
}

/** The sum of the characters' weights, added left to right as Python 3.11's sum() adds them. @param {string} text */
export function textWeight(text) {
  let total = 0;
  for (const char of text) total += charWeight(char);
  return total;
}

/**
 * Frames `text` takes when spoken at the rate `refText` took `refFrames` (unrounded); 0 when the reference has no
 * length or no weight.
 * @param {string} text @param {string} refText @param {number} refFrames
 */
export function estimateFrames(text, refText, refFrames) {
  if (refFrames <= 0 || !refText) return 0.0;
  const refWeight = textWeight(refText);
  if (refWeight === 0) return 0.0;
  const weightPerFrame = refWeight / refFrames;
  const frames = textWeight(text) / weightPerFrame;
  // Short utterances come out too short on a linear rate: lift them.
  if (frames < SHORT_FRAMES) return SHORT_FRAMES * (frames / SHORT_FRAMES) ** (1.0 / BOOST_STRENGTH);
  return frames;
}

/**
 * Target length in frames (at least 1); `speed` > 1 shortens it, <= 0 is ignored as upstream does.
 * @param {string} text @param {string | null | undefined} refText @param {number | null | undefined} numRefAudioTokens
 * @param {number} [speed]
 */
export function estimateTargetTokens(text, refText, numRefAudioTokens, speed = 1.0) {
  if (numRefAudioTokens === null || numRefAudioTokens === undefined || !refText) {
    refText = FALLBACK_REF_TEXT;
    numRefAudioTokens = FALLBACK_REF_FRAMES;
  }
  let frames = estimateFrames(text, refText, numRefAudioTokens);
  if (speed > 0 && speed !== 1.0) frames = frames / speed;
  return Math.max(1, Math.trunc(frames));
}

/**
 * Frames `text` takes at the fallback reference's pace, with no short-utterance lift: a clone prompt this long gives
 * a text cloning it the length it would have without one (at least 1).
 * @param {string} text
 */
export function pacedFrames(text) {
  return Math.max(1, roundHalfEven(textWeight(text) * FALLBACK_REF_FRAMES / textWeight(FALLBACK_REF_TEXT)));
}

/** Python's round() of a float to an integer: halves go to the even neighbour. @param {number} value */
function roundHalfEven(value) {
  const floor = Math.floor(value);
  const rest = value - floor;
  if (rest > 0.5) return floor + 1;
  if (rest < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}

/** Target length for an explicit duration in seconds (at least one frame). @param {number} duration @param {number} [frameRate] */
export function framesForDuration(duration, frameRate = FRAME_RATE) {
  return Math.max(1, Math.trunc(duration * frameRate));
}

/**
 * [targetLen, speed] for one item, as upstream's `_preprocess_all` settles them. `duration` overrides `speed`; the
 * speed returned is then the plain estimate over the forced length, which chunked generation uses to estimate each
 * chunk's length.
 * @param {string} text @param {string | null | undefined} refText @param {number | null | undefined} numRefAudioTokens
 * @param {number | null} [speed] @param {number | null} [duration] @param {number} [frameRate]
 * @returns {[number, number]}
 */
export function resolveTargetLen(text, refText, numRefAudioTokens, speed = null, duration = null, frameRate = FRAME_RATE) {
  if (duration !== null && duration !== undefined) {
    const estimate = estimateTargetTokens(text, refText, numRefAudioTokens, 1.0);
    const targetLen = framesForDuration(duration, frameRate);
    return [targetLen, estimate / targetLen];
  }
  const itemSpeed = speed === null || speed === undefined ? 1.0 : Number(speed);
  return [estimateTargetTokens(text, refText, numRefAudioTokens, itemSpeed), itemSpeed];
}
