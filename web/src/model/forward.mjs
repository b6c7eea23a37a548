/**
 * One decoding step's model forward on the host (codes/runtime/model/forward.py StepForward.host_logits; docs/
 * runtime.md stage 7): embeddings -> backbone -> heads over the target windows, and the cells scored by the build's
 * cell-scoring graph (stage 8). Conditional and unconditional rows run as two backbone calls; the prompt's
 * embeddings are computed once per batch, since only target cells change between steps.
 */
import { UserError } from "../errors.mjs";

import { AUDIO_VOCAB_SIZE, NUM_CODEBOOKS } from "../contract/specs.mjs";

/**
 * @typedef {{inputIds: BigInt64Array, audioMask: Uint8Array, attentionMask: Uint8Array, condLens: number[],
 *            rows: number, length: number}} CfgBatch
 * @typedef {{tokens: Int32Array, scores: Float32Array}} CellScores
 */

/** Seconds per stage, added to as graphs run (what bench pages read). */
export class Timings {
  constructor() { /** @type {Record<string, number>} */ this.seconds = {}; }
  /** @template T @param {string} stage @param {() => Promise<T>} fn @returns {Promise<T>} */
  async time(stage, fn) {
    const start = performance.now();
    try {
      return await fn();
    } finally {
      this.seconds[stage] = (this.seconds[stage] ?? 0) + (performance.now() - start) / 1000;
    }
  }
}

/** A session's float type on one side, for the one input or output named. @param {any} session */
function floatTypeOf(session, side, name) {
  const meta = session[side === "inputs" ? "inputMetadata" : "outputMetadata"];
  const entry = Array.isArray(meta) ? meta.find((m) => m.name === name) : meta?.[name];
  return entry?.type ?? "float32";
}

export class StepForward {
  /**
   * @param {any} ort @param {{embeddings: any, backbone: any, heads: any, scoring?: any, scoringSampled?: any}} sessions
   * @param {Timings} timings
   */
  constructor(ort, sessions, timings) {
    this.ort = ort;
    this.sessions = sessions;
    this.timings = timings;
    for (const [session, side, name] of [[sessions.embeddings, "outputs", "inputs_embeds"],
      [sessions.backbone, "inputs", "inputs_embeds"], [sessions.backbone, "outputs", sessions.backbone.outputNames[0]],
      [sessions.heads, "inputs", "hidden_states"]]) {
      const type = floatTypeOf(session, side, name);
      if (type !== "float32") {
        throw new UserError(`this build's ${name} is ${type}; the JavaScript runtime joins float32 graphs only: ` +
          "use a cpu_fp32, cpu_int8, cpu, cpu_fp16 or web build");
      }
    }
    /** @type {{batch: CfgBatch, embeds: Float32Array} | null} */
    this.prompt = null;
    this.hidden = 0;
  }

  /** @param {string} type @param {any} data @param {number[]} dims */
  tensor(type, data, dims) { return new this.ort.Tensor(type, data, dims); }

  /** @param {BigInt64Array} inputIds [B, 8, S] @param {Uint8Array} audioMask [B, S] @param {number} rows @param {number} length */
  async embed(inputIds, audioMask, rows, length) {
    const out = await this.timings.time("embeddings", () => this.sessions.embeddings.run({
      input_ids: this.tensor("int64", inputIds, [rows, NUM_CODEBOOKS, length]),
      audio_mask: this.tensor("bool", audioMask, [rows, length]),
    }));
    const embeds = out.inputs_embeds;
    this.hidden = embeds.dims[2];
    return /** @type {Float32Array} */ (embeds.data);
  }

  /** @param {Float32Array} embeds [B, S, H] @param {Uint8Array} mask [B, 1, S, S] @param {number} rows @param {number} length */
  async backbone(embeds, mask, rows, length) {
    const session = this.sessions.backbone;
    const out = await this.timings.time("backbone", () => session.run({
      inputs_embeds: this.tensor("float32", embeds, [rows, length, this.hidden]),
      attention_mask: this.tensor("bool", mask, [rows, 1, length, length]),
    }));
    return /** @type {Float32Array} */ (out[session.outputNames[0]].data);
  }

  /** The conditional rows' embeddings, once per batch (the batch object is the key). @param {CfgBatch} batch @param {number} items */
  async promptEmbeddings(batch, items) {
    if (this.prompt === null || this.prompt.batch !== batch) {
      const S = batch.length;
      const embeds = await this.embed(batch.inputIds.subarray(0, items * NUM_CODEBOOKS * S),
        batch.audioMask.subarray(0, items * S), items, S);
      this.prompt = { batch, embeds: new Float32Array(embeds) };
    }
    return this.prompt.embeds;
  }

  /**
   * The heads' logits over the target windows, [2N, 8, T, V]: the N conditional rows, then the unconditional ones.
   * @param {BigInt64Array} inputIds the batch's ids as revealed so far [2N, 8, S] @param {CfgBatch} batch
   * @param {number[]} targetLens
   * @returns {Promise<{logits: any, longest: number}>} logits: an ORT tensor
   */
  async logits(inputIds, batch, targetLens) {
    const N = targetLens.length;
    const T = Math.max(...targetLens);
    const S = batch.length;
    // The unconditional rows' first T columns: every target cell, in both rows the same embedding.
    const targetIds = new BigInt64Array(N * NUM_CODEBOOKS * T);
    const targetMask = new Uint8Array(N * T);
    for (let item = 0; item < N; item++) {
      const row = N + item;
      for (let c = 0; c < NUM_CODEBOOKS; c++) {
        const from = (row * NUM_CODEBOOKS + c) * S;
        targetIds.set(inputIds.subarray(from, from + T), (item * NUM_CODEBOOKS + c) * T);
      }
      targetMask.set(batch.audioMask.subarray(row * S, row * S + T), item * T);
    }
    const targetEmbeds = await this.embed(targetIds, targetMask, N, T);
    const H = this.hidden;
    const condEmbeds = await this.promptEmbeddings(batch, N);
    for (let item = 0; item < N; item++) {
      const condLen = batch.condLens[item];
      const t = targetLens[item];
      condEmbeds.set(targetEmbeds.subarray(item * T * H, (item * T + t) * H), (item * S + condLen - t) * H);
    }
    const condHidden = await this.backbone(condEmbeds, batch.attentionMask.subarray(0, N * S * S), N, S);
    const targetMaskSquare = new Uint8Array(N * T * T);
    for (let item = 0; item < N; item++) {
      for (let q = 0; q < T; q++) {
        const from = ((N + item) * S + q) * S;
        targetMaskSquare.set(batch.attentionMask.subarray(from, from + T), (item * T + q) * T);
      }
    }
    const targetHidden = await this.backbone(targetEmbeds, targetMaskSquare, N, T);
    const windows = new Float32Array(2 * N * T * H);
    for (let item = 0; item < N; item++) {
      const condLen = batch.condLens[item];
      const t = targetLens[item];
      windows.set(condHidden.subarray((item * S + condLen - t) * H, (item * S + condLen) * H), item * T * H);
    }
    windows.set(targetHidden, N * T * H);
    const out = await this.timings.time("heads", () => this.sessions.heads.run({
      hidden_states: this.tensor("float32", windows, [2 * N, T, H]),
    }));
    return { logits: out.logits, longest: T };
  }

  /**
   * Each item's cell tokens and scores from the build's cell-scoring graph, with each item's noise drawn here in
   * the numpy path's order (class, then position): codes/runtime/synthesis.py graph_scores.
   * @param {BigInt64Array} inputIds @param {CfgBatch} batch @param {number[]} targetLens
   * @param {({uniform: (shape: number[]) => Float32Array} | null)[]} noises
   * @param {Array<{guidanceScale: number, layerPenaltyFactor: number, positionTemperature: number, classTemperature: number}>} settings per item
   * @returns {Promise<(CellScores | null)[]>}
   */
  async graphScores(inputIds, batch, targetLens, noises, settings) {
    const N = targetLens.length;
    const sampled = settings.some((s) => s.classTemperature > 0);
    const session = sampled ? this.sessions.scoringSampled : this.sessions.scoring;
    const { logits, longest: T } = await this.logits(inputIds, batch, targetLens);
    const start = performance.now();
    const position = new Float32Array(N * NUM_CODEBOOKS * T);
    const classes = sampled ? new Float32Array(N * NUM_CODEBOOKS * T * AUDIO_VOCAB_SIZE) : null;
    noises.forEach((noise, item) => {
      if (noise === null) return;
      const t = targetLens[item];
      if (classes && settings[item].classTemperature > 0) {
        const draw = noise.uniform([NUM_CODEBOOKS, t, AUDIO_VOCAB_SIZE]);
        for (let c = 0; c < NUM_CODEBOOKS; c++) {
          classes.set(draw.subarray(c * t * AUDIO_VOCAB_SIZE, (c + 1) * t * AUDIO_VOCAB_SIZE),
            ((item * NUM_CODEBOOKS + c) * T) * AUDIO_VOCAB_SIZE);
        }
      }
      if (settings[item].positionTemperature > 0) {
        const draw = noise.uniform([NUM_CODEBOOKS, t]);
        for (let c = 0; c < NUM_CODEBOOKS; c++) position.set(draw.subarray(c * t, (c + 1) * t), (item * NUM_CODEBOOKS + c) * T);
      }
    });
    const perItem = (/** @type {string} */ name) => this.tensor("float32",
      Float32Array.from(settings, (s) => /** @type {any} */ (s)[name]), [N]);
    /** @type {Record<string, any>} */
    const feeds = {
      logits, position_uniform: this.tensor("float32", position, [N, NUM_CODEBOOKS, T]),
      guidance_scale: perItem("guidanceScale"), layer_penalty_factor: perItem("layerPenaltyFactor"),
      position_temperature: perItem("positionTemperature"),
    };
    if (classes) {
      feeds.class_uniform = this.tensor("float32", classes, [N, NUM_CODEBOOKS, T, AUDIO_VOCAB_SIZE]);
      feeds.class_temperature = perItem("classTemperature");
    }
    this.timings.seconds.noise = (this.timings.seconds.noise ?? 0) + (performance.now() - start) / 1000;
    const out = await this.timings.time("scoring", () => session.run(feeds));
    const tokens = /** @type {BigInt64Array} */ (out.tokens.data);
    const scores = /** @type {Float32Array} */ (out.scores.data);
    return noises.map((noise, item) => {
      if (noise === null) return null;
      const t = targetLens[item];
      const cell = { tokens: new Int32Array(NUM_CODEBOOKS * t), scores: new Float32Array(NUM_CODEBOOKS * t) };
      for (let c = 0; c < NUM_CODEBOOKS; c++) {
        const from = (item * NUM_CODEBOOKS + c) * T;
        for (let p = 0; p < t; p++) cell.tokens[c * t + p] = Number(tokens[from + p]);
        cell.scores.set(scores.subarray(from, from + t), c * t);
      }
      return cell;
    });
  }

  /**
   * Each item's (cond, uncond) target logits [8, t, V] on the host, for the numpy reference scoring
   * (codes/runtime/synthesis.py target_logits): what a build without scoring graphs runs.
   * @param {BigInt64Array} inputIds @param {CfgBatch} batch @param {number[]} targetLens
   * @returns {Promise<[Float32Array, Float32Array][]>}
   */
  async targetLogits(inputIds, batch, targetLens) {
    const { logits, longest: T } = await this.logits(inputIds, batch, targetLens);
    const data = /** @type {Float32Array} */ (logits.data);
    const N = targetLens.length;
    const V = AUDIO_VOCAB_SIZE;
    const window = (/** @type {number} */ row, /** @type {number} */ t) => {
      const out = new Float32Array(NUM_CODEBOOKS * t * V);
      for (let c = 0; c < NUM_CODEBOOKS; c++) {
        const from = (row * NUM_CODEBOOKS + c) * T * V;
        out.set(data.subarray(from, from + t * V), c * t * V);
      }
      return out;
    };
    return targetLens.map((t, item) => [window(item, t), window(N + item, t)]);
  }
}
