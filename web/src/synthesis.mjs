/**
 * OmniVoice in JavaScript: the Python runtime's generation contract (codes/runtime/synthesis.py OmniVoiceOnnx) over
 * onnxruntime-node or onnxruntime-web, stage by stage as docs/runtime.md writes it.
 *
 *   const tts = await OmniVoice.load("models/omnivoice-web");
 *   const { audio, sampleRate, codes } = await tts.generate({ text: "Hello there.", language: "en", seed: 0 });
 */
import { UserError } from "./errors.mjs";
import { readManifest, GRAPHS, Manifest } from "./contract/manifest.mjs";
import { chooseBackend, int8WeightsMisfit, onnxRuntime, openSession } from "./contract/backends.mjs";
import { StepForward, Timings } from "./model/forward.mjs";
import { HiggsCodec } from "./audio/codec.mjs";
import { TextTokenizer } from "./text/tokenizer.mjs";
import { languageChoices, designVocabulary } from "./text/voice_design.mjs";
import { streamChunks } from "./text/chunks.mjs";
import { textWeight } from "./text/duration.mjs";
import { settingsOfRequest, manifestDefaults } from "./settings.mjs";
import { settle, planDecoding, needsTranscript, firstChunkVoice } from "./request.mjs";
import { promptBatch } from "./voices/prompt.mjs";
import { itemNoises } from "./model/noise.mjs";
import { iterativeDecode, numpyScores } from "./model/decoding.mjs";
import { crossFadeChunks, postProcess, cleanReference, wholeHops } from "./audio/processing.mjs";
import { addPunctuation } from "./text/cleanup.mjs";
import { readWav } from "./audio/wav.mjs";
import { Voice } from "./voices/voice.mjs";
import { readBytes } from "./files.mjs";

import { SAMPLE_RATE, NUM_CODEBOOKS, AUDIO_MASK_ID } from "./contract/specs.mjs";

export { SAMPLE_RATE };
// wasm32 addresses 4 GiB; the graphs' weights are copied in, and a step's activations and the codec need room beside.
const WASM_WEIGHT_LIMIT = 3 * 2 ** 30;
const CAUSAL_ADVICE = "OmniVoice's iterative unmasking collapses into noise on it: build a bidirectional backbone " +
  "with optimize.py";
const NO_RECOGNISER = "a reference clip needs its transcript (refText / --ref_text) here: the JavaScript runtime has " +
  "no recogniser";

/**
 * @typedef {import("./contract/backends.mjs").Backend} Backend
 * @typedef {{phase: "download", file: string, loaded: number, total: number}
 *   | {phase: "step", step: number, steps: number, chunk: number, chunks: number}} Progress
 * @typedef {{onProgress?: (progress: Progress) => void}} Listening
 * @typedef {{channels: Float32Array[], sampleRate: number}} DecodedAudio
 */

export class OmniVoice {
  /**
   * Load a build: a folder path (Node) or a URL (anywhere).
   * @param {string} base
   * @param {{backend?: Backend, threads?: number, codec?: string} & Listening} [options] codec: a codec folder
   *   (audio_tokenizer/) or a build holding one, instead of the build's own (inference.py's --higgs_dir)
   * @returns {Promise<OmniVoice>}
   */
  static async load(base, options = {}) {
    const { backend, why } = await chooseBackend(options.backend);
    const manifest = await readManifest(base);
    if (manifest.isCodec || Object.keys(manifest.subModels).length === 0) {
      throw new UserError(`${base} holds no OmniVoice backbone (a codec or recogniser folder); load a build made by optimize.py`);
    }
    if (manifest.attention !== "bidirectional") {
      throw new UserError(`${base} holds a ${manifest.attention} backbone: ${CAUSAL_ADVICE}`);
    }
    if (backend === "webgpu" && manifest.profile !== "web") {
      throw new UserError(`backend webgpu cannot run this ${manifest.profile} build (its attention has no WebGPU kernel); ` +
        "build the web profile (optimize.py --device web) or load this one with backend wasm");
    }
    const scoring = manifest.data.scoring ?? {};
    const entries = [GRAPHS.embeddings, GRAPHS.backbone, GRAPHS.heads].map((key) => manifest.entry(key));
    if (backend !== "node") {
      const weights = entries.reduce((sum, entry) => sum + Manifest.sizeOf(entry), 0);
      if (weights > WASM_WEIGHT_LIMIT) {
        throw new UserError(`this ${manifest.profile} build's graphs take ${(weights / 2 ** 30).toFixed(1)} GiB, past what ` +
          `${backend}'s 4 GiB of WebAssembly memory holds beside its work; build the web profile (optimize.py --device web)`);
      }
    }
    const misfit = await int8WeightsMisfit(backend, manifest.data);
    if (misfit !== null) throw new UserError(misfit);
    const ort = await onnxRuntime(backend, options.threads);
    const timings = new Timings();
    const open = (/** @type {Manifest} */ holder, /** @type {any} */ entry, spin = false) =>
      openGraph(ort, backend, options.threads, holder, entry, options.onProgress, spin);
    const [embeddings, backbone, heads] = await Promise.all(entries.map((entry, i) => open(manifest, entry, i === 1)));
    const sessions = { embeddings, backbone, heads,
      scoring: scoring[GRAPHS.scoring] ? await open(manifest, scoring[GRAPHS.scoring]) : undefined };
    const tokenizer = await TextTokenizer.load(base);
    const tts = new OmniVoice(manifest, ort, backend, why, new StepForward(ort, sessions, timings), tokenizer, timings);
    tts.openGraph = async (/** @type {Manifest} */ holder, /** @type {any} */ entry) => open(holder, entry);
    if (options.codec !== undefined) tts.codecHolder = await readManifest(options.codec);
    return tts;
  }

  /**
   * @param {Manifest} manifest @param {any} ort @param {Backend} backend @param {string} why
   * @param {StepForward} forward @param {TextTokenizer} tokenizer @param {Timings} timings
   */
  constructor(manifest, ort, backend, why, forward, tokenizer, timings) {
    this.manifest = manifest;
    this.ort = ort;
    this.backend = backend;
    this.why = why;
    this.forward = forward;
    this.tokenizer = tokenizer;
    this.timings = timings;
    this.profile = manifest.profile;
    this.sampleRate = SAMPLE_RATE;
    this.defaults = manifestDefaults(manifest.data.decoding_defaults);
    /** @type {(holder: Manifest, entry: any) => Promise<any>} */
    this.openGraph = async () => { throw new Error("not loaded"); };
    /** @type {Promise<HiggsCodec> | null} */
    this.codecLoading = null;
    /** @type {Promise<any> | null} */
    this.sampledScoring = null;
    /** The folder whose codec speaks: the build's own unless load() was given one. */
    this.codecHolder = manifest;
  }

  /** [{id, name}]: the languages a request may name. */
  languages() { return languageChoices(); }

  /** The voice-design vocabulary, by category. */
  designVocabulary() { return designVocabulary(); }

  /** The codec, loaded on first use (codes alone never need it). */
  codec() {
    if (this.codecLoading === null) {
      this.codecLoading = (async () => {
        const { section, manifest } = await this.codecHolder.codec();
        return new HiggsCodec(this.ort, section, (key) => this.openGraph(manifest, section.sub_models[key]), this.timings);
      })();
    }
    return this.codecLoading;
  }

  /**
   * A voice from a reference clip and its transcript (upstream's create_voice_clone_prompt; docs/runtime.md,
   * "Reference clips").
   * @param {{refAudio: string | DecodedAudio, refText?: string | null, preprocessPrompt?: boolean}} clip
   */
  async createVoice({ refAudio, refText = null, preprocessPrompt = true }) {
    if (needsTranscript(refText)) throw new UserError(NO_RECOGNISER);
    const decoded = typeof refAudio === "string" ? readWav(await readBytes(refAudio), refAudio) : refAudio;
    if (!decoded?.channels?.length || !(decoded.sampleRate > 0)) {
      throw new UserError("refAudio must be a WAV path or URL, or decoded audio {channels: Float32Array[], sampleRate}");
    }
    const { wav, rms } = cleanReference(decoded.channels, decoded.sampleRate, preprocessPrompt, true);
    const codes = await (await this.codec()).encode(wholeHops(wav));
    const text = preprocessPrompt ? addPunctuation(/** @type {string} */ (refText)) : /** @type {string} */ (refText);
    return new Voice(codes.data, codes.frames, text, rms);
  }

  /** A request's voice: given, saved (bytes or a file), or cloned from a clip. @param {any} request @param {any} settings */
  async voiceOf(request, settings) {
    const { voice, refAudio, refText } = request;
    if (voice instanceof Voice) return voice;
    if (voice instanceof Uint8Array) return Voice.fromBytes(voice, "voice");
    if (typeof voice === "string") return Voice.load(voice);
    if (voice != null) throw new UserError("voice must be a Voice, a saved voice's bytes, or its path or URL");
    if (refAudio != null) return this.createVoice({ refAudio, refText, preprocessPrompt: settings.preprocessPrompt });
    if (refText != null) throw new UserError("refText was given without refAudio; pass the clip it transcribes");
    return null;
  }

  /** Settings from a request's camelCase fields over the build's defaults. @param {any} request */
  settingsOf(request) {
    return settingsOfRequest(request, this.defaults);
  }

  /**
   * How a batch's cells are scored: the build's cell-scoring graphs, else the numpy reference's port.
   * @param {any} settings
   */
  scoreFn(settings) {
    const scoring = this.manifest.data.scoring ?? {};
    if (!scoring[GRAPHS.scoring]) return numpyScores((ids, batch, lens) => this.forward.targetLogits(ids, batch, lens), settings);
    return async (/** @type {BigInt64Array} */ ids, /** @type {any} */ batch, /** @type {number[]} */ lens, /** @type {any[]} */ noises) => {
      if (settings.classTemperature > 0 && !this.forward.sessions.scoringSampled) {
        this.sampledScoring ??= this.openGraph(this.manifest, scoring[GRAPHS.scoringSampled]);
        this.forward.sessions.scoringSampled = await this.sampledScoring;
      }
      return this.forward.graphScores(ids, batch, lens, noises, lens.map(() => settings));
    };
  }

  /**
   * Codes for each request of a plan, round by round (codes/runtime/synthesis.py decode_plan): a list of [8, T]
   * chunks each. A long request without a voice clones its first chunk's codes and text from its second on.
   * @param {any} plan @param {any} settings @param {Listening["onProgress"]} onProgress
   */
  async decodePlan(plan, settings, onProgress) {
    /** @type {{data: Int32Array, frames: number}[][]} */
    const results = plan.requests.map(() => []);
    /** @type {Map<number, any>} */
    const firstChunk = new Map();
    const chunks = plan.rounds.length;
    for (const [round, batch] of plan.rounds.entries()) {
      const requests = batch.map(([i, r]) => (firstChunk.has(i) ? { ...r, voice: firstChunk.get(i) } : r));
      const noises = batch.map(([i]) => plan.noises[i]);
      const onStep = (/** @type {number} */ step, /** @type {number} */ steps) =>
        onProgress?.({ phase: "step", step, steps, chunk: round + 1, chunks });
      const codes = await this.generateWhole(requests, settings, noises, onStep);
      batch.forEach(([i, request], k) => {
        results[i].push(codes[k]);
        if (plan.clonesFirstChunk.has(i) && !firstChunk.has(i)) firstChunk.set(i, firstChunkVoice(codes[k], request.text));
      });
    }
    return results;
  }

  /**
   * Codes [8, targetLen] for each request decoded as one piece.
   * @param {any[]} requests @param {any} settings @param {any[]} noises @param {(step: number, steps: number) => void} onStep
   */
  async generateWhole(requests, settings, noises, onStep) {
    const batch = promptBatch(this.tokenizer, requests, settings.denoise);
    const tokens = await iterativeDecode(batch, requests.map((r) => r.targetLen), null, settings, noises, onStep,
      AUDIO_MASK_ID, this.scoreFn(settings));
    return tokens.map((data, k) => ({ data, frames: requests[k].targetLen }));
  }

  /**
   * Codes -> post-processed 24 kHz audio (upstream's _decode_and_post_process).
   * @param {{data: Int32Array, frames: number}[]} chunks @param {number | null} refRms @param {any} settings
   */
  async decode(chunks, refRms, settings) {
    const codec = await this.codec();
    const pieces = [];
    for (const codes of chunks) pieces.push(await codec.decode(codes));
    const wav = crossFadeChunks(pieces, SAMPLE_RATE);
    return this.timings.time("post-processing", async () => postProcess(wav, refRms, settings, SAMPLE_RATE));
  }

  /**
   * Speech for one request.
   * @param {any} request the brief's request fields (docs/web.md)
   * @param {Listening} [listening]
   * @returns {Promise<{audio: Float32Array, sampleRate: number, codes: {data: BigInt64Array, dims: [number, number]}}>}
   */
  async generate(request, listening = {}) {
    const { settings, requests, seed } = await this.settled(request);
    const plan = planDecoding(requests, settings, itemNoises(seed, requests.length));
    const chunked = (await this.decodePlan(plan, settings, listening.onProgress))[0];
    const audio = await this.decode(chunked, requests[0].voice?.rms ?? null, settings);
    return { audio, sampleRate: SAMPLE_RATE, codes: joinCodes(chunked) };
  }

  /**
   * Speech for one request, a piece at a time as each is made: the text cut as the server cuts a stream
   * (codes/runtime/text/chunks.py: a first clause early, then pieces growing to whole sentences), every piece
   * cloning the same voice, piece i of a seeded request drawing from seed + i, each piece post-processed alone.
   * @param {any} request @param {Listening} [listening]
   */
  async *stream(request, listening = {}) {
    const { settings, voice, seed } = await this.settled(request, false);
    const texts = streamChunks(String(request.text ?? ""));
    if (texts.length === 0) throw new UserError("text is empty; give some words to speak");
    const weights = texts.map((t) => Math.max(textWeight(t), 1e-6));
    const total = weights.reduce((a, b) => a + b, 0);
    const durations = request.duration == null ? null : weights.map((w) => (request.duration * w) / total);
    const requests = settle(texts, request.language ?? null, request.instruct ?? null, voice, durations,
      request.speed ?? null, null, request.normalizeText ?? false);
    const noises = itemNoises(seed, requests.length);
    for (const [index, piece] of requests.entries()) {
      const plan = planDecoding([piece], settings, [noises[index]]);
      const onProgress = listening.onProgress &&
        ((/** @type {Progress} */ p) => listening.onProgress?.(p.phase === "step" ? { ...p, chunk: index + 1, chunks: requests.length } : p));
      const chunked = (await this.decodePlan(plan, settings, onProgress))[0];
      const audio = await this.decode(chunked, voice?.rms ?? null, settings);
      yield { audio, sampleRate: SAMPLE_RATE, index, text: piece.text, codes: joinCodes(chunked), final: index === requests.length - 1 };
    }
  }

  /** A request's settings, voice and settled items. @param {any} request @param {boolean} [whole] */
  async settled(request, whole = true) {
    if (request === null || typeof request !== "object") throw new UserError("a request is an object with at least a text");
    const settings = this.settingsOf(request);
    const voice = await this.voiceOf(request, settings);
    const seed = request.seed ?? null;
    const requests = whole ? settle([request.text], request.language ?? null, request.instruct ?? null, voice,
      request.duration ?? null, request.speed ?? null, request.numFrames ?? null, request.normalizeText ?? false) : [];
    return { settings, voice, requests, seed };
  }
}

/** One request's chunks joined along time, as int64 [8, T]. @param {{data: Int32Array, frames: number}[]} chunks */
function joinCodes(chunks) {
  const frames = chunks.reduce((sum, c) => sum + c.frames, 0);
  const data = new BigInt64Array(NUM_CODEBOOKS * frames);
  let at = 0;
  for (const chunk of chunks) {
    for (let c = 0; c < NUM_CODEBOOKS; c++) {
      for (let p = 0; p < chunk.frames; p++) data[c * frames + at + p] = BigInt(chunk.data[c * chunk.frames + p]);
    }
    at += chunk.frames;
  }
  return { data, dims: /** @type {[number, number]} */ ([NUM_CODEBOOKS, frames]) };
}

/**
 * One graph's session: onnxruntime-node opens the file itself (its sha256 checked first); the web backends get its
 * bytes and its external data's, each checked, with download progress.
 * @param {any} ort @param {Backend} backend @param {number | undefined} threads @param {Manifest} manifest
 * @param {any} entry @param {Listening["onProgress"]} onProgress @param {boolean} spin
 */
async function openGraph(ort, backend, threads, manifest, entry, onProgress, spin) {
  const names = entry.external_data ??
    Object.keys(manifest.data.files ?? {}).filter((name) => name.startsWith(entry.filename + "."));
  try {
    if (backend === "node") {
      for (const name of names) await manifest.verify(name);
      return await openSession(ort, backend, threads, await manifest.verify(entry.filename), spin);
    }
    const onDownload = onProgress && ((/** @type {any} */ p) => onProgress({ phase: "download", ...p }));
    const graph = await manifest.read(entry.filename, { onDownload });
    /** @type {Record<string, Uint8Array>} */
    const external = {};
    for (const name of names) external[name] = await manifest.read(name, { onDownload });
    return await openSession(ort, backend, threads, { graph, external }, spin);
  } catch (error) {
    if (error instanceof UserError) throw error;
    const line = String(/** @type {any} */ (error)?.message ?? error).split("\n").find((l) => l.trim()) ?? "failed";
    throw new UserError(`backend ${backend} cannot open ${entry.filename} of this ${manifest.profile} build (${line.trim()}); ` +
      (backend === "node" ? "rebuild it with optimize.py" : "build the web profile (optimize.py --device web), which every backend runs"));
  }
}
