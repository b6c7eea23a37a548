/**
 * The Higgs Audio V2 codec's graphs (codes/runtime/audio/codec.py HiggsCodec; docs/runtime.md stage 12 and
 * "Reference clips"): codes to 24 kHz samples, and a clip already at 24 kHz in whole hops to codes. This host
 * keeps the codec's API at 24 kHz (the reference clip is resampled before, by the sinc resampler).
 */
import { UserError } from "../errors.mjs";
import { GRAPHS } from "../contract/manifest.mjs";

export class HiggsCodec {
  /**
   * @param {any} ort @param {any} section the codec manifest's "codec" section
   * @param {(key: string) => Promise<any>} open opens one of the codec's graphs by key
   * @param {import("../model/forward.mjs").Timings} timings
   */
  constructor(ort, section, open, timings) {
    this.ort = ort;
    this.section = section;
    this.sampleRate = Number(section.sample_rate);
    this.hopLength = Number(section.hop_length);
    this.numCodebooks = Number(section.num_codebooks);
    this.codebookSize = Number(section.codebook_size);
    this.open = open;
    this.timings = timings;
    /** @type {Map<string, Promise<any>>} */
    this.sessions = new Map();
  }

  /** Graphs load on first use: speaking needs only the decoder. @param {string} key */
  session(key) {
    if (!this.sessions.has(key)) this.sessions.set(key, this.open(key));
    return /** @type {Promise<any>} */ (this.sessions.get(key));
  }

  /**
   * Samples at 24 kHz for codes [8, T].
   * @param {{data: Int32Array | BigInt64Array, frames: number}} codes
   * @returns {Promise<Float32Array>}
   */
  async decode(codes) {
    const { data, frames } = codes;
    if (frames < 1 || data.length !== this.numCodebooks * frames) {
      throw new UserError(`codes must have shape [${this.numCodebooks}, frames] with frames >= 1, got ${data.length} values ` +
        `for ${frames} frames`);
    }
    const ids = new BigInt64Array(data.length);
    for (let i = 0; i < data.length; i++) {
      const value = Number(data[i]);
      if (!(value >= 0 && value < this.codebookSize)) {
        throw new UserError(`codes must lie in 0..${this.codebookSize - 1}, found ${value}`);
      }
      ids[i] = BigInt(value);
    }
    const session = await this.session(GRAPHS.decoder);
    const out = await this.timings.time("codec", () => session.run({
      [session.inputNames[0]]: new this.ort.Tensor("int64", ids, [1, this.numCodebooks, frames]),
    }));
    return new Float32Array(/** @type {Float32Array} */ (out[session.outputNames[0]].data));
  }

  /**
   * Codes [8, T] for a mono clip at 24 kHz already cut to whole hops.
   * @param {Float32Array} wav
   * @returns {Promise<{data: Int32Array, frames: number}>}
   */
  async encode(wav) {
    if (wav.length === 0 || wav.length % this.hopLength !== 0) {
      throw new UserError(`the codec takes whole ${this.hopLength}-sample hops at ${this.sampleRate} Hz, got ${wav.length} samples`);
    }
    const waveform = new this.ort.Tensor("float32", wav, [1, 1, wav.length]);
    const [acoustic, semantic, quantizer] = await Promise.all(
      [GRAPHS.acoustic, GRAPHS.semantic, GRAPHS.quantizer].map((key) => this.session(key)));
    return this.timings.time("codec", async () => {
      const a = await acoustic.run({ [acoustic.inputNames[0]]: waveform });
      const s = await semantic.run({ [semantic.inputNames[0]]: waveform });
      const q = await quantizer.run({
        acoustic_features: a[acoustic.outputNames[0]],
        semantic_features: s[semantic.outputNames[0]],
      });
      const codes = q[quantizer.outputNames[0]];
      return { data: Int32Array.from(codes.data, (v) => Number(v)), frames: codes.dims[2] };
    });
  }
}
