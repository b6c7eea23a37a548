/**
 * Audio host logic: codes/runtime/audio/processing.py's pure parts, function by function (reading files is
 * audio/wav.mjs's). docs/runtime.md stage 13 (post-processing) and "Reference clips" (mono, the sinc resampler,
 * rms, silence removal, whole hops). Vectors: tests/conformance/resample.json (sinc cases), postprocess.json.
 *
 * Waveforms are mono Float32Arrays. Upstream handles silence with pydub on 16-bit PCM; the functions here
 * reproduce pydub's arithmetic exactly (int16 truncation, integer RMS, millisecond slicing that rounds lengths and
 * zero-pads up to a millisecond). Float32 steps round through Math.fround where numpy's float32 ops round.
 */
import { UserError } from "../errors.mjs";
import { pairwiseSum } from "../model/decoding.mjs"; // numpy's float32 sum
import { HOP_LENGTH, SAMPLE_RATE } from "../contract/specs.mjs";

export const REF_RMS_FLOOR = 0.1; // quieter references are raised to this RMS, and the output lowered to match
export const PEAK_WITHOUT_REFERENCE = 0.5;
export const LONG_REFERENCE_S = 20.0;
export const SILENCE_DBFS = -50.0; // upstream's silence threshold for removal and edge trimming
export const SEEK_STEP_MS = 10;
export const CROSS_FADE_GAP_S = 0.3;

const f32 = Math.fround;

/**
 * @typedef {{postprocessOutput: boolean, padDuration: number, fadeDuration: number}} PostSettings the
 *   GenerationSettings post-processing reads
 */

// ---------------------------------------------------------------------------------------------------------------
// Mono, resampling, levels
// ---------------------------------------------------------------------------------------------------------------

/**
 * A mono float32 waveform from [samples] or channels-first [channels][samples] (the channel mean, in float32).
 * @param {ArrayLike<number> | ArrayLike<number>[]} wav
 * @returns {Float32Array}
 */
export function toMono(wav) {
  const first = /** @type {any} */ (wav)[0];
  const nested = wav.length > 0 && first !== null && typeof first === "object";
  if (!nested) return wav instanceof Float32Array ? wav : Float32Array.from(/** @type {ArrayLike<number>} */ (wav));
  const channels = /** @type {ArrayLike<number>[]} */ (wav);
  const length = channels[0].length;
  if (channels.some((c) => c === null || typeof c !== "object" || typeof (/** @type {any} */ (c)[0] ?? 0) !== "number"
    || c.length !== length)) {
    throw new UserError(`a waveform must be [samples] or [channels, samples], got shape ${shapeOf(wav)}`);
  }
  if (channels.length === 1) return channels[0] instanceof Float32Array ? channels[0] : Float32Array.from(channels[0]);
  // numpy's mean over axis 0: channel by channel into a float32 sum, then one float32 division.
  const sum = Float32Array.from(channels[0]);
  for (let c = 1; c < channels.length; c++) {
    const channel = channels[c];
    for (let i = 0; i < length; i++) sum[i] = f32(sum[i] + f32(channel[i]));
  }
  const count = channels.length;
  for (let i = 0; i < length; i++) sum[i] = f32(sum[i] / count);
  return sum;
}

/** A nested array's shape as numpy's list(wav.shape) prints it, as far as it is regular. @param {any} wav */
function shapeOf(wav) {
  const shape = [];
  for (let level = wav; level !== null && typeof level === "object" && "length" in level; level = level[0]) {
    shape.push(level.length);
  }
  return `[${shape.join(", ")}]`;
}

/** @param {number} a @param {number} b */
function gcd(a, b) {
  while (b) [a, b] = [b, a % b];
  return a;
}

/** @type {Map<string, {kernel: Float32Array, width: number}>} */
const KERNELS = new Map();

/**
 * torchaudio's polyphase windowed-sinc filter bank [new, 2 * width + orig] (float32) for reduced rates
 * orig -> new, made once per rate pair.
 * @param {number} orig @param {number} next @param {number} lowpassFilterWidth @param {number} rolloff
 * @returns {{kernel: Float32Array, width: number}}
 */
function sincKernel(orig, next, lowpassFilterWidth, rolloff) {
  const key = `${orig}:${next}:${lowpassFilterWidth}:${rolloff}`;
  const cached = KERNELS.get(key);
  if (cached) return cached;
  const baseFreq = Math.min(orig, next) * rolloff;
  const width = Math.ceil((lowpassFilterWidth * orig) / baseFreq);
  const taps = 2 * width + orig;
  const kernel = new Float32Array(next * taps);
  const scale = baseFreq / orig;
  for (let j = 0; j < next; j++) {
    const phase = -j / next;
    for (let k = 0; k < taps; k++) {
      let t = (phase + (k - width) / orig) * baseFreq;
      t = Math.min(Math.max(t, -lowpassFilterWidth), lowpassFilterWidth);
      const cosine = Math.cos((t * Math.PI) / lowpassFilterWidth / 2);
      const window = cosine * cosine;
      const x = t * Math.PI;
      const sinc = x === 0 ? 1 : Math.sin(x) / x;
      kernel[j * taps + k] = sinc * window * scale;
    }
  }
  const made = { kernel, width };
  KERNELS.set(key, made);
  return made;
}

/**
 * Band-limited resampling of a mono waveform, as torchaudio.functional.resample with its defaults (Hann window
 * squared-cosine, 6 zero crossings, roll-off 0.99), within float32 rounding.
 * @param {Float32Array} wav @param {number} origSr @param {number} newSr
 * @param {number} [lowpassFilterWidth] @param {number} [rolloff]
 * @returns {Float32Array}
 */
export function resample(wav, origSr, newSr, lowpassFilterWidth = 6, rolloff = 0.99) {
  if (!(origSr > 0) || !(newSr > 0)) throw new UserError(`sample rates must be positive, got ${origSr} -> ${newSr}`);
  if (origSr === newSr) return wav;
  const divisor = gcd(Math.trunc(origSr), Math.trunc(newSr));
  const orig = Math.trunc(origSr) / divisor;
  const next = Math.trunc(newSr) / divisor;
  const { kernel, width } = sincKernel(orig, next, lowpassFilterWidth, rolloff);
  const taps = 2 * width + orig;
  const n = wav.length;
  // width zeros before, width + orig after: window i starts at padded sample i * orig.
  const padded = new Float32Array(n + 2 * width + orig);
  padded.set(wav, width);
  // torchaudio rounds the target length through a float32 tensor before ceil().
  const targetLen = Math.ceil(f32((next * n) / orig));
  const out = new Float32Array(targetLen);
  for (let start = 0, o = 0; o < targetLen; start += orig) {
    for (let j = 0; j < next && o < targetLen; j++, o++) {
      const row = j * taps;
      let sum = 0;
      for (let k = 0; k < taps; k++) sum += padded[start + k] * kernel[row + k];
      out[o] = sum;
    }
  }
  return out;
}

/** sqrt(mean(wav²)) in float32 as numpy computes it; 0 for an empty waveform. @param {Float32Array} wav */
export function rms(wav) {
  if (wav.length === 0) return 0;
  const squares = new Float32Array(wav.length);
  for (let i = 0; i < wav.length; i++) squares[i] = wav[i] * wav[i];
  return f32(Math.sqrt(f32(pairwiseSum(squares, 0, squares.length) / wav.length)));
}

/** Drop the tail that does not fill a whole codec frame. @param {Float32Array} wav @param {number} [hopLength] */
export function cutToHops(wav, hopLength = HOP_LENGTH) {
  return wav.subarray(0, wav.length - (wav.length % hopLength));
}

// ---------------------------------------------------------------------------------------------------------------
// pydub's arithmetic on 16-bit PCM, reproduced
// ---------------------------------------------------------------------------------------------------------------

/** int16 samples: trunc(clip(wav * 32768, -32768, 32767)), as upstream's conversion. @param {Float32Array} wav */
function toPcm16(wav) {
  const pcm = new Int16Array(wav.length);
  for (let i = 0; i < wav.length; i++) pcm[i] = Math.trunc(Math.min(Math.max(wav[i] * 32768, -32768), 32767));
  return pcm;
}

/** @param {Int16Array} pcm */
function fromPcm16(pcm) {
  const wav = new Float32Array(pcm.length);
  for (let i = 0; i < pcm.length; i++) wav[i] = pcm[i] / 32768;
  return wav;
}

/** Python's round(): halves to even. @param {number} x */
function roundHalfEven(x) {
  const floor = Math.floor(x);
  const diff = x - floor;
  if (diff > 0.5) return floor + 1;
  if (diff < 0.5) return floor;
  return floor % 2 === 0 ? floor : floor + 1;
}

/** A length in ms as pydub's len(): round(1000 * n / rate). @param {number} numSamples @param {number} sampleRate */
function lengthMs(numSamples, sampleRate) {
  return roundHalfEven(1000 * (numSamples / sampleRate));
}

/** @param {number} ms @param {number} sampleRate */
function msToSamples(ms, sampleRate) {
  return Math.trunc(ms * (sampleRate / 1000));
}

/**
 * pydub's `segment[startMs:endMs]`: bounds clipped to the rounded length in ms, and zero samples appended when
 * that length reaches past the last sample.
 * @param {Int16Array} pcm @param {number} sampleRate @param {number} [startMs] @param {number | null} [endMs]
 * @returns {Int16Array}
 */
function sliceMs(pcm, sampleRate, startMs = 0, endMs = null) {
  const length = lengthMs(pcm.length, sampleRate);
  const start = msToSamples(Math.min(startMs, length), sampleRate);
  const end = msToSamples(endMs === null ? length : Math.min(endMs, length), sampleRate);
  const piece = new Int16Array(Math.max(0, end - start));
  piece.set(pcm.subarray(Math.min(start, pcm.length), Math.min(Math.max(end, start), pcm.length)));
  return piece;
}

// Running sums of squares modulo 2**52: a window's sum (< 2**52 for any window under 4M samples) comes out exact.
const SUM_MODULUS = 2 ** 52;

/** @param {Int16Array} pcm @returns {Float64Array} */
function squareSums(pcm) {
  const sums = new Float64Array(pcm.length + 1);
  let total = 0;
  for (let i = 0; i < pcm.length; i++) {
    total += pcm[i] * pcm[i];
    if (total >= SUM_MODULUS) total -= SUM_MODULUS;
    sums[i + 1] = total;
  }
  return sums;
}

/**
 * audioop.rms of pcm[start:end] zero-padded to end - start samples: floor(sqrt(mean square)), 0 when empty.
 * @param {Float64Array} sums squareSums(pcm) @param {number} start @param {number} end
 */
function windowRms(sums, start, end) {
  const count = end - start;
  if (count <= 0) return 0;
  const n = sums.length - 1;
  let sum = sums[Math.min(end, n)] - sums[Math.min(start, n)];
  if (sum < 0) sum += SUM_MODULUS;
  return Math.floor(Math.sqrt(sum / count));
}

/**
 * pydub compares an integer RMS with this amplitude ("<=" detecting silence) or its dBFS with silenceDbfs ("<" at
 * the edges); both reduce to comparisons with this number.
 * @param {number} silenceDbfs
 */
function silenceAmplitude(silenceDbfs) {
  return 10 ** (silenceDbfs / 20) * 32768;
}

/**
 * pydub.silence.detect_silence: [startMs, endMs] runs where every minSilenceMs window is quiet.
 * @param {Int16Array} pcm @param {number} sampleRate @param {number} minSilenceMs @param {number} silenceDbfs
 * @param {number} seekStepMs
 * @returns {number[][]}
 */
function silentRanges(pcm, sampleRate, minSilenceMs, silenceDbfs, seekStepMs) {
  const length = lengthMs(pcm.length, sampleRate);
  if (length < minSilenceMs) return [];
  const lastStart = length - minSilenceMs;
  const windowStarts = [];
  for (let start = 0; start <= lastStart; start += seekStepMs) windowStarts.push(start);
  if (lastStart % seekStepMs) windowStarts.push(lastStart);
  const sums = squareSums(pcm);
  const toSamples = sampleRate / 1000;
  const threshold = silenceAmplitude(silenceDbfs);
  const quietStarts = windowStarts.filter((startMs) => {
    const endMs = Math.min(startMs + minSilenceMs, length);
    return windowRms(sums, Math.trunc(startMs * toSamples), Math.trunc(endMs * toSamples)) <= threshold;
  });
  if (quietStarts.length === 0) return [];
  const ranges = [];
  let rangeStart = quietStarts[0];
  let previous = rangeStart;
  for (const start of quietStarts.slice(1)) {
    const touches = start === previous + seekStepMs || start <= previous + minSilenceMs;
    if (!touches) {
      ranges.push([rangeStart, previous + minSilenceMs]);
      rangeStart = start;
    }
    previous = start;
  }
  ranges.push([rangeStart, previous + minSilenceMs]);
  return ranges;
}

/**
 * pydub.silence.detect_nonsilent on int16 samples: [startMs, endMs] of the sounding parts.
 * @param {Int16Array} pcm @param {number} sampleRate @param {number} minSilenceMs @param {number} silenceDbfs
 * @param {number} seekStepMs
 * @returns {number[][]}
 */
export function nonsilentRanges(pcm, sampleRate, minSilenceMs, silenceDbfs, seekStepMs) {
  const length = lengthMs(pcm.length, sampleRate);
  const silent = silentRanges(pcm, sampleRate, minSilenceMs, silenceDbfs, seekStepMs);
  if (silent.length === 0) return [[0, length]];
  if (silent[0][0] === 0 && silent[0][1] === length) return [];
  const ranges = [];
  let previousEnd = 0;
  for (const [start, end] of silent) {
    ranges.push([previousEnd, start]);
    previousEnd = end;
  }
  if (silent[silent.length - 1][1] !== length) ranges.push([previousEnd, length]);
  if (ranges[0][0] === 0 && ranges[0][1] === 0) ranges.shift();
  return ranges;
}

/**
 * pydub.silence.detect_leading_silence: where the first chunkMs chunk that is not quiet starts (the length if none).
 * @param {Int16Array} pcm @param {number} sampleRate @param {number} silenceDbfs @param {number} [chunkMs]
 */
function leadingSilenceMs(pcm, sampleRate, silenceDbfs, chunkMs = 10) {
  const length = lengthMs(pcm.length, sampleRate);
  const sums = squareSums(pcm);
  const toSamples = sampleRate / 1000;
  const threshold = silenceAmplitude(silenceDbfs);
  for (let startMs = 0; startMs < length; startMs += chunkMs) {
    const endMs = Math.min(startMs + chunkMs, length);
    if (windowRms(sums, Math.trunc(startMs * toSamples), Math.trunc(endMs * toSamples)) >= threshold) return startMs;
  }
  return length;
}

/**
 * pydub.silence.split_on_silence: sounding parts with up to keepSilenceMs of quiet on each side.
 * @param {Int16Array} pcm @param {number} sampleRate @param {number} minSilenceMs @param {number} silenceDbfs
 * @param {number} keepSilenceMs @param {number} seekStepMs
 * @returns {Int16Array[]}
 */
function splitOnSilence(pcm, sampleRate, minSilenceMs, silenceDbfs, keepSilenceMs, seekStepMs) {
  const ranges = nonsilentRanges(pcm, sampleRate, minSilenceMs, silenceDbfs, seekStepMs)
    .map(([start, end]) => [start - keepSilenceMs, end + keepSilenceMs]);
  for (let i = 0; i + 1 < ranges.length; i++) {
    const before = ranges[i], after = ranges[i + 1];
    if (after[0] < before[1]) { // kept silences overlap: meet halfway
      before[1] = Math.floor((before[1] + after[0]) / 2);
      after[0] = before[1];
    }
  }
  const length = lengthMs(pcm.length, sampleRate);
  return ranges.map(([start, end]) => sliceMs(pcm, sampleRate, Math.max(start, 0), Math.min(end, length)));
}

/** @param {Int16Array[]} pieces */
function concat16(pieces) {
  const out = new Int16Array(pieces.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const piece of pieces) {
    out.set(piece, at);
    at += piece.length;
  }
  return out;
}

/**
 * @param {Int16Array} pcm @param {number} sampleRate @param {number} leadMs @param {number} trailMs
 * @param {number} silenceDbfs
 */
function trimEdges(pcm, sampleRate, leadMs, trailMs, silenceDbfs) {
  const start = Math.max(0, leadingSilenceMs(pcm, sampleRate, silenceDbfs) - leadMs);
  const kept = sliceMs(pcm, sampleRate, start);
  const backwards = kept.slice().reverse();
  const end = Math.max(0, leadingSilenceMs(backwards, sampleRate, silenceDbfs) - trailMs);
  return sliceMs(backwards, sampleRate, end).reverse();
}

// ---------------------------------------------------------------------------------------------------------------
// Upstream's audio steps
// ---------------------------------------------------------------------------------------------------------------

/**
 * Shorten inner silences longer than midSilMs to midSilMs on each side of the sound, then keep at most
 * leadSilMs / trailSilMs of silence at the edges. The output is 16-bit quantised. Equal to upstream at sample
 * rates >= 11025 Hz (pydub would resample slower audio when joining the pieces).
 * @param {Float32Array} wav @param {number} sampleRate
 * @param {number} [midSilMs] @param {number} [leadSilMs] @param {number} [trailSilMs]
 * @returns {Float32Array}
 */
export function removeSilence(wav, sampleRate, midSilMs = 300, leadSilMs = 100, trailSilMs = 300) {
  let pcm = toPcm16(wav);
  if (midSilMs > 0) pcm = concat16(splitOnSilence(pcm, sampleRate, midSilMs, SILENCE_DBFS, midSilMs, SEEK_STEP_MS));
  return fromPcm16(trimEdges(pcm, sampleRate, leadSilMs, trailSilMs, SILENCE_DBFS));
}

/**
 * Audio longer than trimThreshold s is cut to at most maxDuration s, at the start of the last sound that begins
 * before maxDuration (or at maxDuration if that is under minDuration).
 * @param {Float32Array} wav @param {number} sampleRate
 * @param {number} [maxDuration] @param {number} [minDuration] @param {number} [trimThreshold]
 * @returns {Float32Array}
 */
export function trimLongAudio(wav, sampleRate, maxDuration = 15.0, minDuration = 3.0, trimThreshold = 20.0) {
  if (wav.length / sampleRate <= trimThreshold) return wav;
  const pcm = toPcm16(wav);
  const sounds = nonsilentRanges(pcm, sampleRate, 100, -40.0, SEEK_STEP_MS);
  if (sounds.length === 0) return wav;
  const maxMs = Math.trunc(maxDuration * 1000);
  const minMs = Math.trunc(minDuration * 1000);
  let cutMs = 0;
  for (const [start, end] of sounds) {
    if (cutMs < start && start <= maxMs) cutMs = start;
    if (end > maxMs) break;
  }
  if (cutMs < minMs) cutMs = Math.min(maxMs, lengthMs(pcm.length, sampleRate));
  return fromPcm16(sliceMs(pcm, sampleRate, 0, cutMs));
}

/**
 * numpy's linspace(start, stop, count, dtype=float32): computed in double, the last value exactly `stop`.
 * @param {number} start @param {number} stop @param {number} count
 * @returns {Float32Array}
 */
function linspace32(start, stop, count) {
  const out = new Float32Array(count);
  if (count === 1) out[0] = start;
  if (count <= 1) return out;
  const step = (stop - start) / (count - 1);
  for (let i = 0; i < count - 1; i++) out[i] = i * step + start;
  out[count - 1] = stop;
  return out;
}

/**
 * Linear fade-in/out (at most half the length each) and silence padding on both sides, against clicks.
 * @param {Float32Array} wav @param {number} [padDuration] @param {number} [fadeDuration] @param {number} [sampleRate]
 * @returns {Float32Array}
 */
export function fadeAndPad(wav, padDuration = 0.1, fadeDuration = 0.1, sampleRate = SAMPLE_RATE) {
  if (wav.length === 0) return wav;
  const fadeLen = Math.trunc(fadeDuration * sampleRate);
  const padLen = Math.trunc(padDuration * sampleRate);
  const out = new Float32Array(wav.length + 2 * Math.max(padLen, 0));
  const body = out.subarray(Math.max(padLen, 0), Math.max(padLen, 0) + wav.length);
  body.set(wav);
  const rampLen = Math.min(fadeLen, Math.floor(wav.length / 2));
  if (fadeLen > 0 && rampLen > 0) {
    const up = linspace32(0, 1, rampLen);
    const down = linspace32(1, 0, rampLen);
    const tail = wav.length - rampLen;
    for (let i = 0; i < rampLen; i++) {
      body[i] = body[i] * up[i];
      body[tail + i] = body[tail + i] * down[i];
    }
  }
  return out;
}

/**
 * Join chunk audio: each boundary fades out, leaves a gap of silence, fades in (each a third of the gap).
 * @param {Float32Array[]} chunks @param {number} [sampleRate] @param {number} [silenceDuration]
 * @returns {Float32Array}
 */
export function crossFadeChunks(chunks, sampleRate = SAMPLE_RATE, silenceDuration = CROSS_FADE_GAP_S) {
  if (chunks.length === 1) return chunks[0];
  if (chunks.length === 0) return new Float32Array(0);
  const third = Math.floor(Math.trunc(silenceDuration * sampleRate) / 3);
  const total = chunks.reduce((n, c) => n + c.length, 0) + third * (chunks.length - 1);
  const merged = new Float32Array(total);
  merged.set(chunks[0]);
  let length = chunks[0].length;
  for (const chunk of chunks.slice(1)) {
    const fadeOutLen = Math.min(third, length);
    if (fadeOutLen > 0) {
      const down = linspace32(1, 0, fadeOutLen);
      for (let i = 0; i < fadeOutLen; i++) merged[length - fadeOutLen + i] *= down[i];
    }
    const at = length + third; // the gap stays zeros
    merged.set(chunk, at);
    const fadeInLen = Math.min(third, chunk.length);
    if (fadeInLen > 0) {
      const up = linspace32(0, 1, fadeInLen);
      for (let i = 0; i < fadeInLen; i++) merged[at + i] *= up[i];
    }
    length = at + chunk.length;
  }
  return merged;
}

/**
 * A quiet reference (RMS < 0.1, raised before encoding) lowers the output by the same factor; without a
 * reference the output peaks at 0.5.
 * @param {Float32Array} wav @param {number | null} refRms
 * @returns {Float32Array}
 */
export function matchLoudness(wav, refRms) {
  if (refRms !== null && refRms !== undefined) {
    if (!(refRms < REF_RMS_FLOOR)) return wav;
    const gain = f32(refRms), floor = f32(REF_RMS_FLOOR);
    return wav.map((v) => f32(v * gain) / floor);
  }
  // Upstream fails on an empty output here (max of nothing); empty stays empty.
  let peak = 0;
  for (let i = 0; i < wav.length; i++) peak = Math.max(peak, Math.abs(wav[i]));
  if (!(peak > 1e-6)) return wav;
  const target = f32(PEAK_WITHOUT_REFERENCE);
  return wav.map((v) => f32(v / peak) * target);
}

/**
 * Upstream's `_post_process_audio` on decoded audio: silence removal, loudness, fades and padding.
 * @param {Float32Array} wav @param {number | null} refRms @param {PostSettings} settings @param {number} [sampleRate]
 * @returns {Float32Array}
 */
export function postProcess(wav, refRms, settings, sampleRate = SAMPLE_RATE) {
  if (settings.postprocessOutput) wav = removeSilence(wav, sampleRate, 500, 100, 100);
  wav = matchLoudness(wav, refRms);
  return fadeAndPad(wav, settings.padDuration, settings.fadeDuration, sampleRate);
}

/**
 * (24 kHz waveform, rms): upstream's `create_voice_clone_prompt` up to where it transcribes. Mono, resampled to
 * 24 kHz; rms is measured there, and a quieter reference is raised to RMS 0.1. With preprocessPrompt, silences
 * are shortened (inner 200 ms, lead 100 ms, trail 200 ms); references over 20 s are cut at a pause only when
 * there is no transcript (refTextKnown false), since a cut would no longer match it.
 * @param {ArrayLike<number> | ArrayLike<number>[]} wav [samples] or channels-first
 * @param {number} sampleRate @param {boolean} [preprocessPrompt] @param {boolean} [refTextKnown]
 * @param {number} [targetRate]
 * @returns {{wav: Float32Array, rms: number}}
 */
export function cleanReference(wav, sampleRate, preprocessPrompt = true, refTextKnown = true, targetRate = SAMPLE_RATE) {
  let clip = resample(toMono(wav), sampleRate, targetRate);
  const refRms = rms(clip);
  if (refRms > 0 && refRms < REF_RMS_FLOOR) {
    const floor = f32(REF_RMS_FLOOR);
    clip = clip.map((v) => f32(v * floor) / refRms);
  }
  if (preprocessPrompt) {
    if (!refTextKnown) clip = trimLongAudio(clip, targetRate, 15.0, 3.0, LONG_REFERENCE_S);
    clip = removeSilence(clip, targetRate, 200, 100, 200);
    if (clip.length === 0) {
      throw new UserError(
        "reference audio is empty after silence removal; check the file or turn off prompt preprocessing");
    }
  }
  const duration = clip.length / targetRate;
  if (duration > LONG_REFERENCE_S) {
    console.warn(`reference audio is ${duration.toFixed(1)} s long (> 20 s): generation is slower and cloning ` +
      "worse; 3-10 s works best");
  }
  return { wav: clip, rms: refRms };
}

/**
 * The reference cut to whole codec hops, as upstream does before encoding; nothing left is an error.
 * @param {Float32Array} wav @param {number} [hopLength] @param {number} [sampleRate]
 * @returns {Float32Array}
 */
export function wholeHops(wav, hopLength = HOP_LENGTH, sampleRate = SAMPLE_RATE) {
  const cut = cutToHops(wav, hopLength);
  if (cut.length === 0) {
    throw new UserError(`reference audio is shorter than one codec frame (${hopLength} samples at ${sampleRate} Hz)`);
  }
  return cut;
}
