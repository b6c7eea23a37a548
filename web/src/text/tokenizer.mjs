/**
 * OmniVoice's text tokenizer at run time: the build's tokenizer.json through @huggingface/tokenizers alone.
 * codes/runtime/text/tokenizer.py, docs/runtime.md stage 4 (upstream's Qwen2TokenizerFast): Qwen3's byte-level BPE
 * with OmniVoice's tags, encoded with add_special_tokens false (Qwen adds no BOS or EOS).
 */
import { Tokenizer } from "@huggingface/tokenizers";

import { UserError } from "../errors.mjs";
import { join, readJson, readText } from "../files.mjs";
import { reprString } from "./python.mjs";

export class TextTokenizer {
  /** @param {Tokenizer} tokenizer */
  constructor(tokenizer) {
    this.tokenizer = tokenizer;
  }

  /**
   * The tokenizer of a build: its tokenizer.json and tokenizer_config.json, from a folder path or a URL.
   * @param {string | URL} base
   * @param {Parameters<typeof readJson>[1]} [options] download progress and fetch, as files.mjs takes them
   * @returns {Promise<TextTokenizer>}
   */
  static async load(base, options) {
    const tokenizerFile = join(base, "tokenizer.json");
    let text;
    try {
      text = await readText(tokenizerFile, options);
    } catch {
      throw new UserError(`tokenizer file ${tokenizerFile} not found; point at a built model folder`);
    }
    const config = await readJson(join(base, "tokenizer_config.json"), options);
    try {
      return new TextTokenizer(new Tokenizer(JSON.parse(text), config));
    } catch (error) {
      throw new UserError(`cannot read tokenizer file ${tokenizerFile}: ${/** @type {Error} */ (error).message}; ` +
        "rebuild the model folder");
    }
  }

  /** Token ids of `text`, tags matched whole, no special tokens added. @param {string} text @returns {number[]} */
  encode(text) {
    return this.tokenizer.encode(text, { add_special_tokens: false }).ids;
  }

  /** @param {string} token @returns {number} */
  tokenId(token) {
    const id = this.tokenizer.token_to_id(token);
    if (id === undefined) {
      throw new UserError(`token ${reprString(token)} is not in the tokenizer vocabulary; is this an OmniVoice ` +
        "model folder?");
    }
    return id;
  }

  get vocabSize() {
    return this.tokenizer.get_vocab(true).size;
  }
}
