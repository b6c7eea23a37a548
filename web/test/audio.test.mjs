// The audio host logic (src/audio/processing.mjs) against tests/conformance/resample.json (torchaudio's sinc
// resampler) and postprocess.json (pydub-exact silence removal, loudness, fades, padding, cross-fades); and the
// reference clean-up's own rules (mono, rms, whole hops, refusals).
import { test } from "node:test";
import assert from "node:assert/strict";

import {
  cleanReference, crossFadeChunks, cutToHops, fadeAndPad, matchLoudness, nonsilentRanges, postProcess, removeSilence,
  resample, rms, toMono, trimLongAudio, wholeHops,
} from "../src/audio/processing.mjs";
import { UserError } from "../src/errors.mjs";
import { differences, vector } from "./vectors.mjs";

const RESAMPLE = vector("resample");
const POST = vector("postprocess");

// codes/runtime/contract/settings.py's defaults for what post-processing reads (the vector gives only changes).
const POST_DEFAULTS = { postprocess_output: true, pad_duration: 0.1, fade_duration: 0.1 };

/** @param {number[]} pcm16 the vector's int16 samples -> wav = pcm16 / 32768 */
const pcmWav = (pcm16) => Float32Array.from(pcm16, (v) => v / 32768);

for (const c of RESAMPLE.cases.filter((c) => c.inputs.method === "sinc")) {
  test(`resample ${c.name}: torchaudio's sinc within the tolerance`, () => {
    const { wav, orig_sr: orig, new_sr: next } = c.inputs;
    const out = resample(Float32Array.from(wav), orig, next);
    assert.ok(out instanceof Float32Array);
    assert.deepEqual(differences(out, c.expected.wav, RESAMPLE.tolerance), []);
  });
}

test("resample: the same rate gives the same samples; bad rates are refused", () => {
  const wav = Float32Array.from([0.1, -0.2, 0.3]);
  assert.equal(resample(wav, 16000, 16000), wav);
  assert.throws(() => resample(wav, 0, 24000), UserError);
  assert.throws(() => resample(wav, 16000, -1), UserError);
  assert.equal(resample(new Float32Array(0), 16000, 24000).length, 0);
});

for (const c of POST.cases) {
  test(`postprocess ${c.name}`, () => {
    const inputs = c.inputs;
    let out;
    if (inputs.function === "post_process") {
      const s = { ...POST_DEFAULTS, ...inputs.settings };
      out = postProcess(pcmWav(inputs.pcm16), inputs.ref_rms, { postprocessOutput: s.postprocess_output,
        padDuration: s.pad_duration, fadeDuration: s.fade_duration }, inputs.sample_rate);
    } else if (inputs.function === "remove_silence") {
      out = removeSilence(pcmWav(inputs.pcm16), inputs.sample_rate, inputs.mid_sil_ms, inputs.lead_sil_ms,
        inputs.trail_sil_ms);
    } else if (inputs.function === "cross_fade_chunks") {
      out = crossFadeChunks(inputs.chunks_pcm16.map(pcmWav), inputs.sample_rate, inputs.silence_duration);
    } else {
      assert.equal(inputs.function, "match_loudness");
      out = matchLoudness(pcmWav(inputs.pcm16), inputs.ref_rms);
    }
    assert.ok(out instanceof Float32Array);
    assert.deepEqual(differences(out, c.expected.wav, POST.tolerance), []);
  });
}

test("silence removal shortens the long quiet gap and keeps both sounds", () => {
  const c = POST.cases.find((c) => c.name === "post_process_no_reference");
  assert.ok(c);
  const rate = c.inputs.sample_rate;
  const pcm = Int16Array.from(c.inputs.pcm16);
  const ranges = nonsilentRanges(pcm, rate, 500, -50, 10);
  assert.equal(ranges.length, 2, JSON.stringify(ranges));
  const gap = ranges[1][0] - ranges[0][1];
  const out = removeSilence(pcmWav(c.inputs.pcm16), rate, 500, 100, 100);
  const outRanges = nonsilentRanges(Int16Array.from(out, (v) => v * 32768), rate, 500, -50, 10);
  assert.equal(outRanges.length, 2);
  assert.ok(gap > 1000, `${gap}`);
  assert.ok(outRanges[1][0] - outRanges[0][1] <= 1000, "at most 500 ms of quiet kept on each side");
  assert.ok(out.length < pcm.length);
  assert.deepEqual(nonsilentRanges(new Int16Array(rate), rate, 100, -50, 10), []);
  assert.deepEqual(removeSilence(new Float32Array(0), rate).length, 0);
});

test("fades, padding and loudness on their edges", () => {
  assert.equal(fadeAndPad(new Float32Array(0)).length, 0);
  const padded = fadeAndPad(new Float32Array(10).fill(0.5), 0.001, 0.001, 4000);
  assert.equal(padded.length, 18);
  assert.deepEqual(Array.from(padded.subarray(0, 4)), [0, 0, 0, 0]);
  assert.equal(padded[4], 0); // the fade starts at 0 and ends at 0
  assert.equal(padded[13], 0);
  assert.equal(padded[8], 0.5);
  const loud = Float32Array.from([0.2, -0.4]);
  assert.equal(matchLoudness(loud, 0.3), loud);
  assert.deepEqual(Array.from(matchLoudness(loud, null)), [0.25, -0.5]);
  assert.equal(matchLoudness(new Float32Array(3), null).length, 3);
  const one = Float32Array.from([1, 2]);
  assert.equal(crossFadeChunks([one]), one);
});

test("toMono: channels-first averaged in float32; a 1-D clip unchanged; ragged channels refused", () => {
  const left = Float32Array.from([0.1, 0.5, -1]);
  const right = Float32Array.from([0.3, 0.5, 1]);
  const mono = toMono([left, right]);
  assert.deepEqual(Array.from(mono), [0.1, 0.5, -1].map((v, i) =>
    Math.fround(Math.fround(left[i] + right[i]) / 2)));
  assert.equal(toMono(left), left);
  assert.equal(toMono([left]), left);
  assert.throws(() => toMono([left, new Float32Array(2)]), UserError);
});

test("rms, hops, whole hops", () => {
  assert.equal(rms(new Float32Array(0)), 0);
  assert.equal(rms(Float32Array.from([0.5, -0.5, 0.5, -0.5])), 0.5);
  assert.equal(cutToHops(new Float32Array(2000)).length, 1920);
  assert.throws(() => wholeHops(new Float32Array(959)), UserError);
  assert.equal(wholeHops(new Float32Array(960)).length, 960);
});

test("cleanReference: resampled to 24 kHz, quiet clips raised to rms 0.1, silence trimmed; nothing left refused", () => {
  const rate = 16000;
  const clip = new Float32Array(rate); // 1 s: 0.5 s of a quiet tone between silences
  for (let i = rate / 4; i < (3 * rate) / 4; i++) clip[i] = 0.02 * Math.sin(i * 0.3);
  const { wav, rms: level } = cleanReference([clip, clip], rate);
  assert.ok(Math.abs(level - rms(resample(clip, rate, 24000))) < 1e-9);
  assert.ok(level > 0 && level < 0.1);
  assert.ok(wav.length < 24000 && wav.length > 12000, `${wav.length}`);
  assert.ok(Math.abs(rms(wav) - 0.1) < 0.05);
  const kept = cleanReference(clip, rate, false);
  assert.equal(kept.wav.length, 24000);
  assert.throws(() => cleanReference(new Float32Array(rate), rate), UserError);
  assert.equal(trimLongAudio(clip, rate), clip);
});
