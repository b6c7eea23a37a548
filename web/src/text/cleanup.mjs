/**
 * Text clean-up, end punctuation, non-verbal tags and long-text chunking: codes/runtime/text/cleanup.py, for
 * docs/runtime.md stages 2 and 6 (upstream's `_combine_text`, `add_punctuation`, `_tokenize_with_nonverbal_tags`,
 * `chunk_text_punctuation`). The punctuation sets, abbreviations and tag names are codes/runtime/data/text_rules.json.
 * Lengths are Python's, in code points.
 */
import { dataFile } from "../data.mjs";
import { SPACE_CLASS, codePointLength, escapeRegExp, splitWords, strip } from "./python.mjs";

const RULES = await dataFile("text_rules");
/** @type {Set<string>} */
export const SPLIT_PUNCTUATION = new Set(RULES.split_punctuation);
/** @type {Set<string>} */
export const CLOSING_MARKS = new Set(RULES.closing_marks);
/** @type {Set<string>} */
export const END_PUNCTUATION = new Set(RULES.end_punctuation);
/** @type {Set<string>} */
export const ABBREVIATIONS = new Set(RULES.abbreviations);
/** @type {readonly string[]} */
export const NONVERBAL_TAGS = Object.freeze([...RULES.nonverbal_tags]);

// Only the CJK Unified Ideographs block counts as "Chinese" upstream.
const CJK = "\\u4e00-\\u9fff";
const CJK_RE = new RegExp(`[${CJK}]`, "u");
const SPACES_NEXT_TO_CJK = new RegExp(`(?<=[${CJK}])[${SPACE_CLASS}]+|[${SPACE_CLASS}]+(?=[${CJK}])`, "gu");
const NONVERBAL_RE = new RegExp(`\\[(?:${NONVERBAL_TAGS.map(escapeRegExp).join("|")})\\]`, "gu");

/** @param {string} text */
export function containsChinese(text) {
  return CJK_RE.test(text);
}

/**
 * The transcript the model reads: reference text, a space, then the target text, cleaned up.
 * @param {string} text @param {string | null} [refText]
 */
export function combineText(text, refText = null) {
  let fullText = refText ? `${strip(refText)} ${strip(text)}` : strip(text);
  fullText = fullText.replace(/[\r\n]+/g, "");
  fullText = fullText.replaceAll("\uff08", "(").replaceAll("\uff09", ")");
  fullText = fullText.replace(/[ \t]+/g, " ");
  // Chinese has no word spaces; a stray one would be read as a pause.
  return fullText.replace(SPACES_NEXT_TO_CJK, "");
}

/** Strip, then end with "。" (text with Chinese) or "." unless it already ends in punctuation. @param {string} text */
export function addPunctuation(text) {
  text = strip(text);
  const last = Array.from(text).at(-1);
  if (last !== undefined && !END_PUNCTUATION.has(last)) text += containsChinese(text) ? "。" : ".";
  return text;
}

/**
 * Text cut around non-verbal tags like "[laughter]", each tag a piece of its own, empty pieces dropped: upstream
 * tokenizes every piece separately, so a tag gets the same ids whatever language surrounds it.
 * @param {string} text @returns {string[]}
 */
export function splitNonverbal(text) {
  const pieces = [];
  let lastEnd = 0;
  for (const match of text.matchAll(NONVERBAL_RE)) {
    const start = /** @type {number} */ (match.index);
    if (start > lastEnd) pieces.push(text.slice(lastEnd, start));
    pieces.push(match[0]);
    lastEnd = start + match[0].length;
  }
  if (lastEnd < text.length) pieces.push(text.slice(lastEnd));
  return pieces;
}

/** @param {string[]} sentence */
function endsInAbbreviation(sentence) {
  const words = splitWords(sentence.join(""));
  return words.length > 0 && ABBREVIATIONS.has(words[words.length - 1]);
}

/**
 * Characters (code points) grouped into sentences, each ending at split punctuation. A "." after an abbreviation
 * ("Mr.") ends none, and punctuation or closing quotes that would open a sentence join the previous one.
 * @param {string} text @returns {string[][]}
 */
export function splitSentences(text) {
  /** @type {string[][]} */
  const sentences = [];
  /** @type {string[]} */
  let current = [];
  for (const char of text) {
    if (current.length === 0 && sentences.length > 0 && (SPLIT_PUNCTUATION.has(char) || CLOSING_MARKS.has(char))) {
      sentences[sentences.length - 1].push(char);
      continue;
    }
    current.push(char);
    if (SPLIT_PUNCTUATION.has(char) && !(char === "." && endsInAbbreviation(current))) {
      sentences.push(current);
      current = [];
    }
  }
  if (current.length > 0) sentences.push(current);
  return sentences;
}

/**
 * Long text split at sentence ends into chunks of at most `chunkLen` characters; a longer sentence stays whole.
 * With `minChunkLen`, a chunk shorter than that joins the previous one (a short first chunk takes in the second).
 * Chunks are stripped; empty ones are dropped.
 * @param {string} text @param {number} chunkLen @param {number | null} [minChunkLen]
 * @returns {string[]}
 */
export function chunkTextPunctuation(text, chunkLen, minChunkLen = null) {
  /** @type {string[][]} */
  let chunks = [];
  /** @type {string[]} */
  let current = [];
  for (const sentence of splitSentences(text)) {
    if (current.length + sentence.length <= chunkLen) {
      current.push(...sentence);
    } else {
      if (current.length > 0) chunks.push(current);
      current = sentence;
    }
  }
  if (current.length > 0) chunks.push(current);

  if (minChunkLen !== null && minChunkLen !== undefined) {
    const firstIsShort = chunks.length > 0 && chunks[0].length < minChunkLen;
    /** @type {string[][]} */
    const merged = [];
    chunks.forEach((chunk, index) => {
      const joinsPrevious = (index === 1 && firstIsShort) || (chunk.length < minChunkLen && merged.length > 0);
      if (joinsPrevious) merged[merged.length - 1].push(...chunk);
      else merged.push(chunk);
    });
    chunks = merged;
  }
  return chunks.map((chunk) => strip(chunk.join(""))).filter((chunk) => chunk);
}

/**
 * Characters per chunk so that each lasts about `audioChunkDuration` seconds, scaled by the whole text's estimated
 * frames per character, as upstream's `_generate_chunked` does.
 * @param {string} text @param {number} targetLen @param {number} audioChunkDuration @param {number} frameRate
 */
export function chunkLenFor(text, targetLen, audioChunkDuration, frameRate) {
  const framesPerChar = targetLen / codePointLength(text);
  return Math.trunc(audioChunkDuration * frameRate / framesPerChar);
}

/**
 * Upstream's chunking of a long item: punctuation chunks of about `audioChunkDuration` s, at least 3 characters.
 * @param {string} text @param {number} targetLen @param {number} audioChunkDuration @param {number} frameRate
 */
export function chunkLongText(text, targetLen, audioChunkDuration, frameRate) {
  const chunkLen = chunkLenFor(text, targetLen, audioChunkDuration, frameRate);
  return chunkTextPunctuation(text, chunkLen, 3);
}
