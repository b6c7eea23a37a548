// One timed synthesis, the same in Node and in a page (codes/checks/web_bench.py runs both): load, a short warm-up,
// then one utterance with each step's time, decoded at temperature 0 so that its codes can be held to another host's
// on the same build. Returns plain numbers and the codes; asserts nothing.

/**
 * @param {any} OmniVoice the runtime's class (from web/src/index.mjs, or a site's omnivoice.mjs)
 * @param {string} base the build's folder or URL
 * @param {{backend?: string, threads?: number, text: string, language?: string, duration?: number, numSteps?: number,
 *          seed?: number}} options
 */
export async function timedRun(OmniVoice, base, options) {
  let downloaded = 0;
  const files = new Map();
  const loadStart = performance.now();
  const tts = await OmniVoice.load(base, {
    backend: options.backend, threads: options.threads,
    onProgress: (/** @type {any} */ p) => { if (p.phase === "download") files.set(p.file, p.loaded); },
  });
  const loadSeconds = (performance.now() - loadStart) / 1000;
  for (const bytes of files.values()) downloaded += bytes;
  const request = { text: options.text, language: options.language ?? "en", duration: options.duration,
    numSteps: options.numSteps ?? 32, seed: options.seed ?? 0, positionTemperature: 0, classTemperature: 0 };
  const warmStart = performance.now();
  await tts.generate({ ...request, text: "Warm up.", duration: undefined, numSteps: 2 });
  const warmSeconds = (performance.now() - warmStart) / 1000;
  /** @type {number[]} */
  const stepTimes = [];
  let last = performance.now();
  const start = last;
  const result = await tts.generate(request, {
    onProgress: (/** @type {any} */ p) => {
      if (p.phase !== "step") return;
      const now = performance.now();
      stepTimes.push((now - last) / 1000);
      last = now;
    },
  });
  const seconds = (performance.now() - start) / 1000;
  const audioSeconds = result.audio.length / result.sampleRate;
  const sorted = [...stepTimes].sort((a, b) => a - b);
  return {
    backend: tts.backend, why: tts.why, profile: tts.profile, load_s: loadSeconds, warmup_s: warmSeconds,
    generate_s: seconds, audio_s: audioSeconds, rtf: seconds / audioSeconds, steps: stepTimes.length,
    step_median_s: sorted[Math.floor(sorted.length / 2)] ?? null, frames: result.codes.dims[1],
    downloaded_bytes: downloaded, stages_s: tts.timings.seconds, codes: Array.from(result.codes.data, Number),
  };
}
