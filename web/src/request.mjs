/**
 * An utterance as the engine takes it, a settled request with its voice, and the rules that make requests from what
 * a caller gives (upstream's `_preprocess_all`), then the plan that decodes them: each request's noise source and,
 * for a long one, its chunks (upstream's `_generate_chunked`), all settled before any is decoded.
 * codes/runtime/request.py (and voices/voice.py's first_chunk_voice), docs/runtime.md stages 1 and 6. Pure rules: no
 * model and no file is needed.
 */
import { UserError } from "./errors.mjs";
import { itemNoises } from "./model/noise.mjs";
import { maxItemFrames } from "./settings.mjs";
import { chunkLongText, containsChinese } from "./text/cleanup.mjs";
import { FRAME_RATE, estimateTargetTokens, resolveTargetLen } from "./text/duration.mjs";
import { str, strip } from "./text/python.mjs";
import { resolveInstruct, resolveLanguage } from "./text/voice_design.mjs";

/**
 * @typedef {{codes: Int32Array, frames: number, text: string, rms: number | null}} Voice codes [8, frames]
 * @typedef {{text: string, lang: string | null, instruct: string | null, voice: Voice | null, targetLen: number,
 *   speed: number}} Request one utterance, settled
 * @typedef {import("./settings.mjs").GenerationSettings} GenerationSettings
 * @typedef {import("./model/noise.mjs").NoiseSource} NoiseSource
 * @typedef {{requests: Request[], noises: NoiseSource[], rounds: [number, Request][][], clonesFirstChunk: Set<number>}}
 *   DecodingPlan the rounds that decode the requests, one batch each: (a request's index, what the round decodes of it)
 */

/** Whether a reference clip's transcript is missing (null or blank), so a recogniser must make it. @param {string | null | undefined} refText */
export function needsTranscript(refText) {
  return refText === null || refText === undefined || !strip(refText);
}

/**
 * Upstream's long-form rule: a first chunk spoken without a voice is the reference of what follows. rms null: its
 * loudness is no reference level.
 * @param {{data: Int32Array, frames: number}} codes [8, frames] @param {string} text
 * @returns {Voice}
 */
export function firstChunkVoice(codes, text) {
  return { codes: codes.data, frames: codes.frames, text, rms: null };
}

/** Whether upstream generates the request in chunks: its length is over audioChunkThreshold. @param {Request} request @param {GenerationSettings} settings */
export function isLong(request, settings) {
  return request.targetLen > maxItemFrames(settings);
}

/** A long request's text cut into upstream's chunks (about audioChunkDuration each). @param {Request} request @param {GenerationSettings} settings */
export function longFormChunks(request, settings) {
  return chunkLongText(request.text, request.targetLen, settings.audioChunkDuration, FRAME_RATE);
}

/**
 * One chunk of a long request, cloning `voice` (its own, or its first chunk's), its length estimated at the
 * request's speed, as upstream's `_generate_chunked` does.
 * @param {Request} request @param {string} text @param {Voice | null} voice
 * @returns {Request}
 */
export function chunkRequest(request, text, voice) {
  const targetLen = estimateTargetTokens(text, voice ? voice.text : null, voice ? voice.frames : null, request.speed);
  return { text, lang: request.lang, instruct: request.instruct, voice, targetLen, speed: request.speed };
}

/**
 * A long request's chunks (longFormChunks), each settled as chunkRequest settles it, cloning the request's voice;
 * without one, each chunk after the first clones the first, whose codes are [8, its targetLen]: its length is known
 * now, its voice once those codes are made (firstChunkVoice).
 * @param {Request} request @param {GenerationSettings} settings
 * @returns {Request[]}
 */
export function chunkRequests(request, settings) {
  const texts = longFormChunks(request, settings);
  const voice = request.voice;
  let refText = voice ? voice.text : null;
  let refFrames = voice ? voice.frames : null;
  /** @type {Request[]} */
  const chunks = [];
  for (const text of texts) {
    chunks.push({ text, lang: request.lang, instruct: request.instruct, voice,
      targetLen: estimateTargetTokens(text, refText, refFrames, request.speed), speed: request.speed });
    if (voice === null && chunks.length === 1) {
      refText = text;
      refFrames = chunks[0].targetLen;
    }
  }
  return chunks;
}

/**
 * A value given once, or one per text, as one per text.
 * @template T
 * @param {T | T[]} value @param {number} count @param {string} name
 * @returns {T[]}
 */
export function onePerText(value, count, name) {
  const values = Array.isArray(value) ? value : [value];
  if (values.length === 1) return Array(count).fill(values[0]);
  if (values.length !== count) {
    throw new UserError(`${name} has ${values.length} values for ${count} texts; give one, or one per text`);
  }
  return values;
}

/**
 * Per-item requests as upstream's `_preprocess_all`: languages, texts, instructs, target lengths. Every argument but
 * normalizeText may be one value or one per text (an array); null or undefined is "not given".
 * normalizeText (WeTextProcessing, num2words) has no JavaScript port: it is refused.
 * @param {string | string[]} texts
 * @param {any} [language] @param {any} [instruct] @param {Voice | null | (Voice | null)[]} [voice]
 * @param {any} [duration] @param {any} [speed] @param {any} [numFrames] @param {boolean} [normalizeText]
 * @param {{warn?: (message: string) => void}} [options] where an unknown language's warning goes (console.warn)
 * @returns {Request[]}
 */
export function settle(texts, language = null, instruct = null, voice = null, duration = null, speed = null,
  numFrames = null, normalizeText = false, options = {}) {
  const list = typeof texts === "string" ? [texts] : [...texts];
  if (list.length === 0) throw new UserError("no text to synthesize");
  for (const text of list) {
    if (typeof text !== "string" || !strip(text)) throw new UserError("text is empty; give at least one word to synthesize");
  }
  if (normalizeText) {
    throw new UserError("normalize_text needs WeTextProcessing and num2words, which the JavaScript runtime does not " +
      "have; normalize the text before (inference.py --normalize_text), or leave it off");
  }
  const count = list.length;
  const languages = onePerText(language, count, "language");
  const instructs = onePerText(instruct, count, "instruct");
  const durations = onePerText(duration, count, "duration");
  const speeds = onePerText(speed, count, "speed");
  const frames = onePerText(numFrames, count, "num_frames");
  const voices = onePerText(voice, count, "voice");
  return list.map((text, i) => {
    const lang = resolveLanguage(languages[i], options.warn);
    const [dur, spd, nFrames, itemVoice] = [durations[i], speeds[i], frames[i], voices[i] ?? null];
    if (dur !== null && dur !== undefined && !(dur > 0)) throw new UserError(`duration must be > 0 seconds, got ${str(dur)}`);
    if (spd !== null && spd !== undefined && !(spd > 0)) throw new UserError(`speed must be > 0, got ${str(spd)}`);
    const refText = itemVoice ? itemVoice.text : null;
    const refFrames = itemVoice ? itemVoice.frames : null;
    let [targetLen, itemSpeed] = resolveTargetLen(text, refText, refFrames, spd, dur);
    if (nFrames !== null && nFrames !== undefined) { // an exact frame count, as duration is in seconds
      if (!(nFrames >= 1)) throw new UserError(`the number of audio tokens must be >= 1, got ${str(nFrames)}`);
      const plain = estimateTargetTokens(text, refText, refFrames);
      targetLen = Math.trunc(nFrames);
      itemSpeed = plain / targetLen;
    }
    return { text, lang, instruct: resolveInstruct(instructs[i], containsChinese(text)), voice: itemVoice, targetLen,
      speed: itemSpeed };
  });
}

/**
 * The plan that decodes `requests`. noise: one source per request (an array: each request's codes then depend on
 * nothing else in the batch), or one source shared in upstream's draw order; null: a source per request, item i
 * drawing from seed + i (itemNoises; fresh entropy without a seed).
 * @param {Request[]} requests @param {GenerationSettings} settings
 * @param {NoiseSource | NoiseSource[] | null} [noise] @param {number | bigint | string | null} [seed]
 * @returns {DecodingPlan}
 */
export function planDecoding(requests, settings, noise = null, seed = null) {
  const noises = noise === null || noise === undefined ? itemNoises(seed, requests.length)
    : Array.isArray(noise) ? [...noise] : requests.map(() => noise);
  const long = requests.flatMap((request, i) => (isLong(request, settings) ? [i] : []));
  const withVoice = long.map((i) => requests[i].voice !== null);
  if (withVoice.some((has) => has) && !withVoice.every((has) => has)) {
    throw new UserError("long texts in one batch must all have a reference voice or none");
  }
  /** @type {Map<number, Request[]>} */
  const chunks = new Map(long.map((i) => [i, chunkRequests(requests[i], settings)]));
  /** @type {[number, Request][][]} */
  const rounds = [requests.flatMap((request, i) => (chunks.has(i) ? [] : [[i, request]]))];
  const longest = Math.max(0, ...[...chunks.values()].map((itemChunks) => itemChunks.length));
  for (let index = 0; index < longest; index++) {
    rounds.push([...chunks].flatMap(([i, itemChunks]) => (index < itemChunks.length ? [[i, itemChunks[index]]] : [])));
  }
  return { requests, noises, rounds: rounds.filter((batch) => batch.length > 0),
    clonesFirstChunk: new Set(long.filter((i) => requests[i].voice === null)) };
}
