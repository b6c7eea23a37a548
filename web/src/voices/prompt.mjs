/**
 * The model's input for one item, and the padded CFG batch, as upstream builds them: codes/runtime/voices/prompt.py,
 * docs/runtime.md stage 5 (upstream's `OmniVoice._prepare_inference_inputs` and the batch of `_generate_iterative`).
 *
 * One item's conditional sequence, every column repeated over the 8 codebooks:
 *
 *   [<|denoise|>]<|lang_start|>{lang|None}<|lang_end|><|instruct_start|>{instruct|None}<|instruct_end|>
 *   <|text_start|>{ref_text + " " + text, cleaned}<|text_end|>
 *   reference codes [8, T_ref] (if any), then the target: [8, targetLen] all MASK
 *
 * `audioMask` is 1 from the reference codes (or the target) on. The tokenizer is any object whose encode(text)
 * recognises the tags written in the text and adds no tokens of its own (text/tokenizer.mjs's TextTokenizer).
 * Arrays are row-major, in the Python array's C order.
 */
import { UserError } from "../errors.mjs";
import { combineText, splitNonverbal } from "../text/cleanup.mjs";

// codes/runtime/contract/specs.py
import { AUDIO_MASK_ID, CODEBOOK_SIZE, NUM_CODEBOOKS } from "../contract/specs.mjs";

export const DENOISE = "<|denoise|>";
export const LANG_START = "<|lang_start|>";
export const LANG_END = "<|lang_end|>";
export const INSTRUCT_START = "<|instruct_start|>";
export const INSTRUCT_END = "<|instruct_end|>";
export const TEXT_START = "<|text_start|>";
export const TEXT_END = "<|text_end|>";
const PAD_ID = AUDIO_MASK_ID; // upstream pads the batch with the MASK id; padded cells are never attended to

/**
 * @typedef {{encode(text: string): number[]}} TextTokenizerLike
 * @typedef {{data: Int32Array, frames: number}} Codes [8, frames]
 * @typedef {{inputIds: Int32Array, audioMask: Uint8Array, length: number}} PromptItem ids [8, N], mask [N]
 * @typedef {{inputIds: BigInt64Array, audioMask: Uint8Array, attentionMask: Uint8Array, condLens: number[],
 *   rows: number, length: number, dims: [number, number, number]}} CfgBatch ids [2B, 8, S] (conditional rows
 *   0..B-1, unconditional rows B..2B-1), audioMask [2B, S], attentionMask [2B, 1, S, S] (query i may attend to key
 *   j), each conditional row's unpadded length; dims [2B, 8, S]
 */

/**
 * The style prefix; "None" stands in for a missing language or instruct, as in training.
 * @param {string | null} lang @param {string | null} instruct @param {boolean} withReference @param {boolean} denoise
 */
export function styleText(lang, instruct, withReference, denoise) {
  const prefix = denoise && withReference ? DENOISE : "";
  return `${prefix}${LANG_START}${lang || "None"}${LANG_END}${INSTRUCT_START}${instruct || "None"}${INSTRUCT_END}`;
}

/**
 * <|text_start|>{refText text}<|text_end|> tokenized, each non-verbal tag on its own.
 * @param {TextTokenizerLike} tokenizer @param {string} text @param {string | null} [refText]
 * @returns {number[]}
 */
export function textTokenIds(tokenizer, text, refText = null) {
  const wrapped = `${TEXT_START}${combineText(text, refText)}${TEXT_END}`;
  return splitNonverbal(wrapped).flatMap((piece) => tokenizer.encode(piece));
}

/**
 * Reference codes as [8, frames] Int32Array with values in [0, 1024): {data, frames} (data of 8 * frames integers,
 * Int32Array, BigInt64Array or numbers), or 8 rows of numbers.
 * @param {{data: ArrayLike<number | bigint>, frames: number} | ArrayLike<ArrayLike<number | bigint>>} refCodes
 * @returns {Codes}
 */
export function checkRefCodes(refCodes) {
  let rows;
  let frames;
  /** @type {ArrayLike<number | bigint>[]} */
  let parts;
  if ("data" in refCodes && "frames" in refCodes) {
    frames = refCodes.frames;
    rows = frames > 0 ? refCodes.data.length / frames : 0;
    parts = [refCodes.data];
  } else {
    const nested = /** @type {ArrayLike<ArrayLike<number | bigint>>} */ (refCodes);
    rows = nested.length;
    frames = rows > 0 ? nested[0].length : 0;
    parts = Array.from(nested);
    if (parts.some((row) => row.length !== frames)) frames = -1;
  }
  if (rows !== NUM_CODEBOOKS || !(frames >= 1) || !Number.isInteger(frames)) {
    throw new UserError(`reference codes must have shape [${NUM_CODEBOOKS}, frames >= 1], got [${rows}, ${frames}]`);
  }
  const data = new Int32Array(NUM_CODEBOOKS * frames);
  let at = 0;
  for (const part of parts) {
    for (let i = 0; i < part.length; i++) {
      const value = Number(part[i]);
      if (!Number.isInteger(value) || value < 0 || value >= CODEBOOK_SIZE) {
        throw new UserError(`reference codes must be integers in [0, ${CODEBOOK_SIZE}); the voice prompt is damaged`);
      }
      data[at++] = value;
    }
  }
  return { data, frames };
}

/**
 * One item's conditional inputIds [8, N] and audioMask [N] (upstream `_prepare_inference_inputs`). `lang` and
 * `instruct` must already be resolved (text/voice_design.mjs).
 * @param {TextTokenizerLike} tokenizer @param {string} text @param {number} targetLen
 * @param {{refText?: string | null, refCodes?: Parameters<typeof checkRefCodes>[0] | null, lang?: string | null,
 *   instruct?: string | null, denoise?: boolean}} [options]
 * @returns {PromptItem}
 */
export function buildPrompt(tokenizer, text, targetLen,
  { refText = null, refCodes = null, lang = null, instruct = null, denoise = true } = {}) {
  if (!(targetLen >= 1)) throw new UserError(`target length must be at least 1 frame, got ${targetLen}`);
  const withReference = refCodes !== null && refCodes !== undefined;
  const textIds = [...tokenizer.encode(styleText(lang, instruct, withReference, denoise)),
    ...textTokenIds(tokenizer, text, refText)];
  const reference = withReference ? checkRefCodes(refCodes) : { data: new Int32Array(0), frames: 0 };
  const textLen = textIds.length;
  const length = textLen + reference.frames + targetLen;
  const inputIds = new Int32Array(NUM_CODEBOOKS * length);
  for (let c = 0; c < NUM_CODEBOOKS; c++) {
    const row = c * length;
    inputIds.set(textIds, row);
    inputIds.set(reference.data.subarray(c * reference.frames, (c + 1) * reference.frames), row + textLen);
    inputIds.fill(AUDIO_MASK_ID, row + textLen + reference.frames, row + length);
  }
  const audioMask = new Uint8Array(length).fill(1, textLen);
  return { inputIds, audioMask, length };
}

/**
 * The 2B-row batch for classifier-free guidance, padded to the longest conditional row. Conditional row i holds item
 * i's whole prompt; unconditional row B + i only its target region, at the start. Each row attends within its own
 * valid square; an unconditional row's padding attends only to itself, a conditional row's to nothing (upstream
 * leaves those mask rows all false; their outputs are never read).
 * @param {PromptItem[]} items @param {number[]} targetLens
 * @returns {CfgBatch}
 */
export function buildCfgBatch(items, targetLens) {
  if (items.length !== targetLens.length || items.length === 0) {
    throw new Error(`need one target length per item, got ${items.length} items and ${targetLens.length} lengths`);
  }
  const count = items.length;
  const rows = 2 * count;
  const condLens = items.map((item) => item.length);
  const S = Math.max(...condLens);
  const inputIds = new BigInt64Array(rows * NUM_CODEBOOKS * S).fill(BigInt(PAD_ID));
  const audioMask = new Uint8Array(rows * S);
  const attentionMask = new Uint8Array(rows * S * S);

  /** @param {number} row @param {number} size a row's valid square [0, size)² */
  const attendWithin = (row, size) => {
    for (let q = 0; q < size; q++) attentionMask.fill(1, (row * S + q) * S, (row * S + q) * S + size);
  };
  /** @param {number} row @param {PromptItem} item @param {number} from the item's first column copied @param {number} size */
  const copyColumns = (row, item, from, size) => {
    for (let c = 0; c < NUM_CODEBOOKS; c++) {
      const source = c * item.length + from;
      const target = (row * NUM_CODEBOOKS + c) * S;
      for (let p = 0; p < size; p++) inputIds[target + p] = BigInt(item.inputIds[source + p]);
    }
    audioMask.set(item.audioMask.subarray(from, from + size), row * S);
  };

  items.forEach((item, i) => {
    const condLen = condLens[i];
    const targetLen = targetLens[i];
    if (!(targetLen >= 1 && targetLen <= condLen)) {
      throw new Error(`target length ${targetLen} does not fit item ${i} of length ${condLen}`);
    }
    const uncondRow = count + i;
    copyColumns(i, item, 0, condLen);
    attendWithin(i, condLen);
    copyColumns(uncondRow, item, condLen - targetLen, targetLen);
    attendWithin(uncondRow, targetLen);
    for (let p = targetLen; p < S; p++) attentionMask[(uncondRow * S + p) * S + p] = 1;
  });
  return { inputIds, audioMask, attentionMask, condLens, rows, length: S, dims: [rows, NUM_CODEBOOKS, S] };
}

/**
 * The CFG batch that decodes settled requests (request.mjs: text, targetLen, lang, instruct and voice, its text and
 * codes) as whole pieces.
 * @param {TextTokenizerLike} tokenizer
 * @param {{text: string, targetLen: number, lang: string | null, instruct: string | null,
 *   voice: {codes: Int32Array, frames: number, text: string} | null}[]} requests
 * @param {boolean} denoise
 * @returns {CfgBatch}
 */
export function promptBatch(tokenizer, requests, denoise) {
  const items = requests.map((r) => buildPrompt(tokenizer, r.text, r.targetLen, {
    refText: r.voice ? r.voice.text : null,
    refCodes: r.voice ? { data: r.voice.codes, frames: r.voice.frames } : null,
    lang: r.lang, instruct: r.instruct, denoise }));
  return buildCfgBatch(items, requests.map((r) => r.targetLen));
}
