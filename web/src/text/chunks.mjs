/**
 * Text into streaming chunks, a short first chunk for early audio, then chunks that grow back to sentences:
 * codes/runtime/text/chunks.py, docs/runtime.md stage 6 "Streaming" (ours: upstream streams nothing).
 *
 * - Sentences end at . ! ? and their CJK forms (an abbreviation's "." does not end one, nor one inside a word or
 *   number: 5.3, e.g).
 * - The first sentence is cut at clause boundaries (, ; : spaced dashes, and the CJK 、，；：), so the first audio is
 *   a clause of at least `minWeight`; the rest of that sentence follows in pieces that each weigh at least twice the
 *   one before, until the sentence ends.
 * - Later sentences are grouped up to `maxWeight`.
 * - Nothing ever weighs more than `maxWeight`: a longer sentence is cut at clauses, then at spaces, then (scripts
 *   without spaces) by characters, so every chunk fits one work item.
 *
 * No character is lost, repeated or reordered. Indexes here are UTF-16 units: every mark is in the BMP, and where
 * Python looks at the character after one (isalnum, isspace) the port reads the whole code point.
 */
import { ABBREVIATIONS, CLOSING_MARKS } from "./cleanup.mjs";
import { charWeight, textWeight } from "./duration.mjs";
import { SPACE_CLASS, isAllSpace, isAlnumAt, isSpace, strip } from "./python.mjs";

export const SENTENCE_ENDS = new Set(".!?…。！？");
export const CLAUSE_MARKS = new Set(",;:，、；：—–");
const SPACED_DASH = new RegExp(`[${SPACE_CLASS}][-–—][${SPACE_CLASS}]`, "gu"); // " - " is a dash; "well-known" a word
const WORDS_AND_SPACES = new RegExp(`[^${SPACE_CLASS}]+[${SPACE_CLASS}]*|[${SPACE_CLASS}]+`, "gu");
// Lengths are spoken weight (duration.mjs: a Latin letter 1, a CJK character 3), so one limit fits every script.
export const MIN_WEIGHT = 4; // no first chunk lighter than this: "Sure," (4.5) may stand alone, "Oh," (2.5) joins the next
export const MAX_WEIGHT = 200; // later chunks: whole sentences up to this weight (about 12 s of English)
const LONGEST_ABBREVIATION = Math.max(...[...ABBREVIATIONS].map((word) => word.length));

/**
 * `text` cut after each mark (closing quotes and further marks stay with it); pieces keep their spaces.
 * @param {string} text @param {Set<string>} marks @param {boolean} [spacedDash]
 * @returns {string[]}
 */
function cutAfter(text, marks, spacedDash = false) {
  const cuts = new Set();
  let runEnd = 0;
  for (let index = 0; index < text.length; index++) {
    const char = text[index];
    if (!marks.has(char) || index < runEnd) continue; // inside a run already cut at its end: "!!!" is read once
    if (char === "." && abbreviationBefore(text, index)) continue;
    if (".!?".includes(char) && index + 1 < text.length && isAlnumAt(text, index + 1)) continue; // 5.3, e.g, a.m.
    let end = index + 1;
    while (end < text.length && (marks.has(text[end]) || CLOSING_MARKS.has(text[end]))) end++;
    cuts.add(end);
    runEnd = end;
  }
  if (spacedDash) {
    for (const match of text.matchAll(SPACED_DASH)) cuts.add(/** @type {number} */ (match.index) + match[0].length - 1);
  }
  const bounds = [0, ...[...cuts].filter((cut) => cut > 0 && cut < text.length).sort((a, b) => a - b), text.length];
  const pieces = [];
  for (let i = 0; i + 1 < bounds.length; i++) {
    const piece = text.slice(bounds[i], bounds[i + 1]);
    if (piece) pieces.push(piece);
  }
  return pieces;
}

/**
 * Whether the word that ends at `dot` is an abbreviation. It looks back no further than the longest abbreviation,
 * so a text of many dots is read in linear time.
 * @param {string} text @param {number} dot
 */
function abbreviationBefore(text, dot) {
  let start = dot;
  while (start > 0 && !isSpace(text[start - 1]) && dot - start < LONGEST_ABBREVIATION) start--;
  if (start > 0 && !isSpace(text[start - 1])) return false; // a longer word: no abbreviation
  return ABBREVIATIONS.has(text.slice(start, dot + 1));
}

/** @param {string} text */
export function sentences(text) {
  return cutAfter(text, SENTENCE_ENDS);
}

/** @param {string} sentence */
export function clauses(sentence) {
  return cutAfter(sentence, CLAUSE_MARKS, true);
}

/** @param {string} text */
function weight(text) {
  return textWeight(strip(text));
}

/**
 * A run without spaces (Chinese, Japanese, Thai) cut into pieces of at most maxWeight.
 * @param {string} word @param {number} maxWeight @returns {string[]}
 */
function splitRun(word, maxWeight) {
  const out = [];
  let current = "";
  let currentWeight = 0.0; // weight(current), kept as the run is read
  let spoken = false;
  for (const char of word) {
    const added = isSpace(char) ? 0.0 : charWeight(char); // white space only ends a run: strip() drops it
    if (spoken && currentWeight + added > maxWeight) {
      out.push(current);
      current = "";
      currentWeight = 0.0;
      spoken = false;
    }
    current += char;
    currentWeight += added;
    spoken = spoken || !isSpace(char);
  }
  return current ? [...out, current] : out;
}

/**
 * A piece with no usable punctuation cut to at most maxWeight: at spaces, else by characters.
 * @param {string} piece @param {number} maxWeight @returns {string[]}
 */
function byLength(piece, maxWeight) {
  const out = [];
  let current = "";
  for (let word of piece.match(WORDS_AND_SPACES) ?? []) {
    if (weight(word) > maxWeight) {
      if (strip(current)) {
        out.push(current);
        current = "";
      }
      const runs = splitRun(word, maxWeight);
      word = /** @type {string} */ (runs.pop());
      out.push(...runs);
    }
    if (strip(current) && weight(current + word) > maxWeight) {
      out.push(current);
      current = "";
    }
    current += word;
  }
  if (strip(current)) out.push(current);
  else if (current && out.length > 0) out[out.length - 1] += current;
  return out;
}

/**
 * piece, or its clauses, or its words, each of at most maxWeight.
 * @param {string} piece @param {number} maxWeight @returns {string[]}
 */
function fitted(piece, maxWeight) {
  if (weight(piece) <= maxWeight) return [piece];
  const out = [];
  for (const clause of clauses(piece)) {
    if (weight(clause) <= maxWeight) out.push(clause);
    else out.push(...byLength(clause, maxWeight));
  }
  return out;
}

/**
 * Consecutive pieces joined while the chunk weighs less than least(chunks so far) and fits maxWeight.
 * @param {string[]} pieces @param {(done: string[]) => number} least @param {number} maxWeight
 * @returns {string[]}
 */
function grouped(pieces, least, maxWeight) {
  const chunks = [];
  let current = "";
  for (const piece of pieces) {
    if (strip(current) && (weight(current) >= least(chunks) || weight(current + piece) > maxWeight)) {
      chunks.push(current);
      current = "";
    }
    current += piece;
  }
  if (strip(current)) chunks.push(current);
  return chunks;
}

/**
 * The chunks a streamed text is spoken in, in order, stripped (see the module's comment).
 * @param {string} text @param {number} [minWeight] @param {number} [maxWeight]
 * @returns {string[]}
 */
export function streamChunks(text, minWeight = MIN_WEIGHT, maxWeight = MAX_WEIGHT) {
  const parts = sentences(text);
  if (parts.length === 0) return [];
  const [first, ...rest] = parts;
  const pieces = clauses(first).flatMap((clause) => fitted(clause, maxWeight));
  const head = grouped(pieces, (done) => (done.length > 0 ? Math.max(minWeight, 2 * weight(done[done.length - 1])) : minWeight),
    maxWeight);
  const tail = grouped(rest.flatMap((sentence) => fitted(sentence, maxWeight)), () => maxWeight, maxWeight);
  return [...head, ...tail].map(strip).filter((chunk) => chunk);
}

/**
 * Chunks of a text that arrives in pieces (an LLM's reply as it is written): push() gives each sentence as soon as
 * it is complete, flush() the rest. The first audio is a clause, as in streamChunks: given as soon as it is
 * complete, or the first sentence cut as streamChunks cuts it where it came whole; later sentences come whole (cut
 * only past `maxWeight`). A sentence is complete once what follows it shows it ends: white space after its mark, or
 * (CJK) the mark itself, and never an abbreviation's dot ("Dr. " waits for the next word).
 *
 * Work is linear in the text however it is cut: a mark's verdict is final once the character after its run has
 * come, so each scan goes on from where the last push left it. `examined` counts the characters read.
 */
export class TextStream {
  /** @param {number} [minWeight] @param {number} [maxWeight] */
  constructor(minWeight = MIN_WEIGHT, maxWeight = MAX_WEIGHT) {
    this.minWeight = minWeight;
    this.maxWeight = maxWeight;
    this.pending = "";
    this.started = false;
    this.examined = 0;
    this.sentenceFrom = 0; // where the sentence scan goes on
    this.sentenceRun = 0; // a run of marks at the end, read to here
    this.clauseFrom = 0; // the same for the first clause's scan
    this.clauseRun = 0;
    this.dashEnd = 0; // where the last spaced dash ended (spaced dashes do not overlap, as in SPACED_DASH)
  }

  /** Scan `pending` from its start again (it has just lost its head). */
  rescan() {
    this.sentenceFrom = this.sentenceRun = 0;
    this.clauseFrom = this.clauseRun = 0;
    this.dashEnd = 0;
  }

  /** @param {string} text @returns {string[]} */
  push(text) {
    this.pending += text;
    const end = this.complete();
    if (!end && !this.started) return this.firstClause(); // the first sentence goes on: its first clause may go now
    return this.chunks(this.take(end));
  }

  /** @param {number} end */
  take(end) {
    const done = this.pending.slice(0, end);
    this.pending = this.pending.slice(end);
    if (end) this.rescan();
    return done;
  }

  /**
   * How much of `pending` is complete sentences (0: none): up to the last cut that sentences() makes, or all of it
   * where it ends a sentence (white space after the cut, or a CJK mark).
   */
  complete() {
    const text = this.pending;
    let lastCut = 0;
    let index = this.sentenceFrom;
    while (index < text.length) {
      this.examined += 1;
      const char = text[index];
      if (!SENTENCE_ENDS.has(char) || (char === "." && abbreviationBefore(text, index))) {
        index += 1;
        continue;
      }
      if (".!?".includes(char) && index + 1 < text.length && isAlnumAt(text, index + 1)) { // 5.3, e.g, a.m.
        index += 1;
        continue;
      }
      let end = Math.max(index + 1, this.sentenceRun);
      while (end < text.length && (SENTENCE_ENDS.has(text[end]) || CLOSING_MARKS.has(text[end]))) {
        end += 1;
        this.examined += 1;
      }
      if (end === text.length) { // "Hello." may go on as "Hello..." or 'Hello."': the next piece decides
        this.sentenceRun = end;
        break;
      }
      lastCut = end;
      index = end;
      this.sentenceRun = 0;
    }
    this.sentenceFrom = index;
    if (index < text.length && "。！？".includes(text[text.length - 1])) return text.length;
    if (lastCut && isAllSpace(text.slice(lastCut))) return text.length;
    return lastCut;
  }

  /**
   * The opening clauses of an unfinished first sentence once they weigh `minWeight` and more text follows them (a
   * clause is complete only then).
   * @returns {string[]}
   */
  firstClause() {
    const text = this.pending;
    let index = this.clauseFrom;
    while (index < text.length) {
      this.examined += 1;
      const cut = this.clauseCut(text, index);
      if (cut === null) {
        index += 1;
        continue;
      }
      if (cut === text.length) break; // its end is not known yet
      this.examined += cut;
      if (weight(text.slice(0, cut)) >= this.minWeight) {
        this.started = true;
        const head = this.take(cut);
        return fitted(head, this.maxWeight).map(strip).filter((piece) => piece);
      }
      index = cut;
    }
    this.clauseFrom = index;
    return [];
  }

  /**
   * Where clauses() cuts after the character at `index` (text.length: not known yet), or null.
   * @param {string} text @param {number} index @returns {number | null}
   */
  clauseCut(text, index) {
    const char = text[index];
    if ("-–—".includes(char) && 0 < index && index - 1 >= this.dashEnd && isSpace(text[index - 1])) {
      if (index + 1 === text.length) return text.length;
      if (isSpace(text[index + 1])) {
        this.dashEnd = index + 2;
        return index + 1;
      }
    }
    if (!CLAUSE_MARKS.has(char)) return null;
    let end = Math.max(index + 1, this.clauseRun);
    while (end < text.length && (CLAUSE_MARKS.has(text[end]) || CLOSING_MARKS.has(text[end]))) {
      end += 1;
      this.examined += 1;
    }
    this.clauseRun = end === text.length ? end : 0;
    return end;
  }

  /** @returns {string[]} */
  flush() {
    return this.chunks(this.take(this.pending.length));
  }

  /** @param {string} text @returns {string[]} */
  chunks(text) {
    this.examined += text.length;
    if (!strip(text)) return [];
    if (!this.started) {
      this.started = true;
      return streamChunks(text, this.minWeight, this.maxWeight);
    }
    return sentences(text).flatMap((sentence) => fitted(sentence, this.maxWeight)).map(strip).filter((chunk) => chunk);
  }
}
