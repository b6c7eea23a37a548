#!/usr/bin/env node
/**
 * omnivoice: speak one text with an omnivoice-onnx build from Node, by inference.py's flags (its --text path):
 *
 *   omnivoice --model_dir models/omnivoice-cpu --text "Hello there." --output hello.wav
 *   omnivoice --model_dir DIR --text "..." --ref_audio me.wav --ref_text "What I said." --output out.wav
 *   omnivoice --model_dir DIR --text "..." --voice me.pt --seed 7 --output out.wav --codes_out out.npy
 *
 * Every setting `tts.generate` takes has inference.py's flag (the table is web/src/settings.mjs, the camelCase
 * twin of codes/runtime/contract/settings.py); the request goes to OmniVoice.load(modelDir, {backend, threads})
 * and tts.generate. Bad input is one `error: ...` line on stderr and exit 2, found before the model loads where
 * it can be, and nothing is written: each file is written under a new temporary name beside it and renamed
 * into place at the end. An existing --output or --codes_out is replaced, as inference.py replaces it; a
 * --save_voice file never is.
 */
import fs from "node:fs";
import path from "node:path";
import { randomBytes } from "node:crypto";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { UserError } from "../src/errors.mjs";
import { settingsFromFlags } from "../src/settings.mjs";
import { reprString } from "../src/text/python.mjs";
import { encodeWav, readWav } from "../src/audio/wav.mjs";
import { writeNpy } from "../src/audio/npy.mjs";
import { Voice } from "../src/voices/voice.mjs";

const MANIFEST_NAME = "omnivoice_manifest.json";
const DEFAULT_BUILD = path.join("models", "omnivoice-cpu"); // inference.py's default (manifest.py default_build_dir)

/**
 * The flags, as inference.py spells them, and how each value is read: "str", "path", "float", "int", "bool"
 * (upstream's true/false word), or "switch" (no value).
 * @type {Record<string, {type: string, help: string}>}
 */
const FLAGS = {
  model_dir: { type: "path", help: "a build folder from optimize.py (default: models/omnivoice-cpu)" },
  higgs_dir: { type: "path", help: "a codec folder (audio_tokenizer/) or a build holding one (default: the model folder's)" },
  text: { type: "str", help: "the text to speak" },
  language: { type: "str", help: "language id or name (e.g. en, English); unknown ones fall back to none" },
  instruct: { type: "str", help: 'voice design, e.g. "female, low pitch, british accent"' },
  ref_audio: { type: "path", help: "reference clip to clone: a WAV (any rate, mono or stereo)" },
  ref_text: { type: "str", help: "transcript of --ref_audio (required: the JavaScript runtime has no recogniser)" },
  voice: { type: "path", help: "a voice file: ours (.npz), upstream's VoiceClonePrompt.save (.pt) or wyoming-piper's ref.rvq" },
  save_voice: { type: "path", help: "save the voice (of --ref_audio, or --voice) to this new file: NAME.pt upstream's format, any other name our .npz" },
  duration: { type: "float", help: "output length in seconds (overrides --speed)" },
  speed: { type: "float", help: "speaking rate factor (> 1 faster)" },
  num_steps: { type: "int", help: "decoding steps (upstream's default: 32)" },
  guidance_scale: { type: "float", help: "classifier-free guidance (upstream's default: 2.0)" },
  t_shift: { type: "float", help: "schedule shift (upstream's default: 0.1)" },
  layer_penalty_factor: { type: "float", help: "score penalty per codebook (upstream's default: 5.0)" },
  position_temperature: { type: "float", help: "noise on which cells to reveal (upstream's default: 5.0)" },
  class_temperature: { type: "float", help: "sampling of the token values; 0 = argmax (upstream's default: 0.0)" },
  audio_chunk_duration: { type: "float", help: "long-text chunking, as upstream (default: 15.0 s)" },
  audio_chunk_threshold: { type: "float", help: "chunk only past this estimate (default: 30.0 s)" },
  denoise: { type: "bool", help: "the <|denoise|> token when cloning: true or false (default: true)" },
  preprocess_prompt: { type: "bool", help: "silence trimming of the reference clip and end punctuation on its transcript: true or false (default: true)" },
  postprocess_output: { type: "bool", help: "removal of long silences from the output: true or false (default: true)" },
  no_denoise: { type: "switch", help: "as --denoise false" },
  no_postprocess: { type: "switch", help: "as --postprocess_output false" },
  seed: { type: "int", help: "seed for the sampling noise: same seed, same output (as inference.py's)" },
  output: { type: "path", help: "the WAV file to write, 16-bit PCM (default: output.wav)" },
  codes_out: { type: "path", help: "also save the generated codes [8,T] int64 (.npy)" },
  threads: { type: "int", help: "ONNX Runtime intra-op threads (default: all cores)" },
  backend: { type: "str", help: "node (onnxruntime-node, the default) or wasm (onnxruntime-web); this CLI's own flag" },
  quiet: { type: "switch", help: "no progress line" },
  help: { type: "switch", help: "show this help and exit" },
};
const ALIASES = { num_step: "num_steps" }; // upstream's OmniVoiceGenerationConfig spelling
// inference.py's flags this CLI does not take, and why: named in one line rather than "unrecognized".
const PYTHON_ONLY = {
  text_file: "the Node CLI speaks one --text", jsonl: "the Node CLI speaks one --text", script: "scripts and books are inference.py's",
  normalize_text: "text normalization runs on WeTextProcessing, which is Python's: write numbers out as words",
  asr_dir: "the JavaScript runtime has no recogniser: give --ref_text",
  backbone: "the build's own backbone is used", provider: "this CLI's --backend chooses node or wasm",
  float_wav: "this CLI writes 16-bit PCM WAV", num_audio_tokens: "give --duration (seconds; 25 frames a second)",
  batch_size: "the Node CLI speaks one --text", captions: "captions are inference.py's", caption_words: "captions are inference.py's",
};

const PYTHON_SWITCHES = ["normalize_text", "float_wav", "caption_words"];

/** @param {string} message @returns {never} */
function usageError(message) {
  throw new UserError(message);
}

/** Negative numbers are values, as argparse takes them (`--guidance_scale -1`); parseArgs would call them flags. */
function joinNegativeValues(/** @type {string[]} */ argv) {
  const out = [];
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i].startsWith("--") ? argv[i].slice(2) : "";
    const spec = FLAGS[/** @type {keyof typeof FLAGS} */ (ALIASES[/** @type {keyof typeof ALIASES} */ (flag)] ?? flag)];
    if (spec && spec.type !== "switch" && i + 1 < argv.length && /^-(\d|\.\d|inf|nan)/i.test(argv[i + 1])) {
      out.push(`${argv[i]}=${argv[++i]}`);
    } else out.push(argv[i]);
  }
  return out;
}

/** float(): Python's spellings (underscores between digits, inf, nan, white space around). @param {string} text */
function pythonFloat(text) {
  const word = text.trim();
  const digits = "\\d(?:_?\\d)*";
  const number = new RegExp(`^[+-]?(?:(?:${digits})?\\.?(?:${digits})?(?:[eE][+-]?${digits})?|inf|infinity|nan)$`, "i");
  if (!number.test(word) || !/\d|inf|nan/i.test(word)) return null;
  const clean = word.replace(/_/g, "").toLowerCase();
  if (/inf/.test(clean)) return clean.startsWith("-") ? -Infinity : Infinity;
  if (/nan/.test(clean)) return NaN;
  return Number(clean);
}

/** int(): decimal digits with an optional sign; a BigInt past 2^53. @param {string} text */
function pythonInt(text) {
  const word = text.trim();
  if (!/^[+-]?\d(?:_?\d)*$/.test(word)) return null;
  const value = BigInt(word.replace(/_/g, ""));
  return Number.isSafeInteger(Number(value)) ? Number(value) : value;
}

/** upstream's str2bool. @param {string} text */
function trueOrFalse(text) {
  const word = text.trim().toLowerCase();
  if (["yes", "true", "t", "y", "1"].includes(word)) return true;
  if (["no", "false", "f", "n", "0"].includes(word)) return false;
  return null;
}

/**
 * The command line as inference.py's argparse reads it: {flag: value} by snake_case names, values typed; a bad
 * one is argparse's message.
 * @param {string[]} argv
 * @returns {Record<string, any>}
 */
export function readFlags(argv) {
  /** @type {Record<string, {type: "string" | "boolean"}>} */
  const options = {};
  for (const [name, spec] of [...Object.entries(FLAGS), ...Object.entries(ALIASES).map(([a, n]) => [a, FLAGS[n]])]) {
    options[/** @type {string} */ (name)] = { type: /** @type {any} */ (spec).type === "switch" ? "boolean" : "string" };
  }
  for (const name of Object.keys(PYTHON_ONLY)) options[name] = { type: PYTHON_SWITCHES.includes(name) ? "boolean" : "string" };
  let parsed;
  try {
    parsed = parseArgs({ args: joinNegativeValues(argv), options, strict: true, allowPositionals: false }).values;
  } catch (error) {
    const message = String(/** @type {any} */ (error).message);
    const option = /'(--?[^ '=]+)/.exec(message)?.[1] ?? "";
    const code = /** @type {any} */ (error).code;
    if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && /does not take an argument/.test(message)) {
      const given = argv.find((arg) => arg.startsWith(`${option}=`))?.slice(option.length + 1) ?? "";
      usageError(`argument ${option}: ignored explicit argument ${reprString(given)}`);
    }
    if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE") usageError(`argument ${option}: expected one argument`);
    if (code === "ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL") usageError(`unrecognized arguments: ${/'([^']*)'/.exec(message)?.[1] ?? message}`);
    usageError(`unrecognized arguments: ${option || message}`);
  }
  /** @type {Record<string, any>} */
  const flags = {};
  for (const [given, value] of Object.entries(parsed)) {
    const name = ALIASES[/** @type {keyof typeof ALIASES} */ (given)] ?? given;
    if (Object.hasOwn(PYTHON_ONLY, name)) {
      usageError(`--${name} is inference.py's alone: ${PYTHON_ONLY[/** @type {keyof typeof PYTHON_ONLY} */ (name)]}`);
    }
    const type = FLAGS[/** @type {keyof typeof FLAGS} */ (name)].type;
    if (type === "switch" || type === "str" || type === "path") flags[name] = value;
    else {
      const text = /** @type {string} */ (value);
      const read = type === "float" ? pythonFloat(text) : type === "int" ? pythonInt(text) : trueOrFalse(text);
      if (read === null) {
        usageError(type === "bool" ? `argument --${name}: expected true or false, got ${reprString(text)}`
          : `argument --${name}: invalid ${type} value: ${reprString(text)}`);
      }
      flags[name] = read;
    }
  }
  return flags;
}

function helpText() {
  const lines = ["usage: omnivoice --text TEXT [--model_dir DIR] [--output OUT.wav] [options]", "",
    "Speak one text with an omnivoice-onnx build (inference.py's flags, in Node).", ""];
  for (const [name, spec] of Object.entries(FLAGS)) {
    const value = { str: " TEXT", path: " PATH", float: " X", int: " N", bool: " BOOL", switch: "" }[spec.type];
    lines.push(`  --${name}${value}`.padEnd(34) + spec.help);
  }
  return lines.join("\n");
}

/**
 * Fail early if `file` cannot be written (outputs.py check_output_path): missing folder, a file or folder in the
 * way, no permission.
 * @param {string} file
 */
function checkOutputPath(file, what = "output") {
  if (isFolder(file)) usageError(`${what} ${file} is a folder; give a file name`);
  let folder = path.dirname(path.resolve(file));
  try {
    folder = fs.realpathSync(folder);
  } catch { /* resolved as far as it goes */ }
  if (fs.existsSync(folder) && !isFolder(folder)) usageError(`cannot write ${what} ${file}: ${folder} is a file, not a folder`);
  if (!isFolder(folder)) usageError(`cannot write ${what} ${file}: folder ${folder} does not exist; create it or choose another path`);
  try {
    fs.accessSync(folder, fs.constants.W_OK);
  } catch {
    usageError(`cannot write ${what} ${file}: folder ${folder} is not writable`);
  }
}

/** @param {string} file */
function isFolder(file) {
  try {
    return fs.statSync(file).isDirectory();
  } catch {
    return false;
  }
}

/** The files this run made and has not yet put in place: removed whatever happens. @type {Set<string>} */
const temporaries = new Set();

/**
 * A new empty file of a new name beside `final` (fileio.py atomic_path's `.NAME.XXXXXXXXXXXX.ext`), written with
 * `bytes`.
 * @param {string} final @param {Uint8Array} bytes
 */
function writeTemporary(final, bytes) {
  const dir = path.dirname(final);
  const base = path.basename(final);
  for (;;) {
    const tmp = path.join(dir, `.${base}.${randomBytes(6).toString("hex")}${path.extname(final)}`);
    let fd;
    try {
      fd = fs.openSync(tmp, "wx");
    } catch (error) {
      if (/** @type {any} */ (error).code === "EEXIST") continue;
      throw new UserError(`cannot write ${final}: ${/** @type {any} */ (error).code ?? error}`);
    }
    temporaries.add(tmp);
    try {
      fs.writeSync(fd, bytes);
    } catch (error) {
      throw new UserError(`cannot write ${final}: ${/** @type {any} */ (error).code ?? error}`);
    } finally {
      fs.closeSync(fd);
    }
    return tmp;
  }
}

/** Put a written temporary in place, replacing what is there (inference.py's os.replace). @param {string} tmp @param {string} final */
function publish(tmp, final) {
  fs.renameSync(tmp, final);
  temporaries.delete(tmp);
}

/** Put a written temporary in place only if nothing is there (fileio.py _publish_new). @param {string} tmp @param {string} final */
function publishNew(tmp, final) {
  try {
    fs.linkSync(tmp, final);
  } catch (error) {
    if (/** @type {any} */ (error).code === "EEXIST") return false;
    if (fs.existsSync(final)) return false; // a filesystem without hard links: a check, then a rename
    publish(tmp, final);
    return true;
  }
  fs.unlinkSync(tmp);
  temporaries.delete(tmp);
  return true;
}

function removeTemporaries() {
  for (const tmp of temporaries) {
    try {
      fs.unlinkSync(tmp);
    } catch { /* already gone */ }
  }
  temporaries.clear();
}

/** A one-line progress display on a terminal: decoding steps, chunk by chunk. @param {boolean} quiet */
function progressLine(quiet) {
  if (quiet || !process.stderr.isTTY) return { onProgress: undefined, done: () => {} };
  let shown = false;
  return {
    onProgress: (/** @type {any} */ p) => {
      if (p.phase !== "step") return;
      const chunk = p.chunks > 1 ? ` (chunk ${p.chunk}/${p.chunks})` : "";
      process.stderr.write(`\rdecoding: step ${p.step}/${p.steps}${chunk}\x1b[K`);
      shown = true;
    },
    done: () => {
      if (shown) process.stderr.write("\r\x1b[K");
    },
  };
}

/** @param {string[]} argv */
export async function main(argv) {
  const flags = readFlags(argv);
  if (flags.help) {
    console.log(helpText());
    return 0;
  }
  const settings = settingsFromFlags(flags);
  if (flags.text === undefined) usageError("the argument --text is required (the text to speak)");
  if (flags.ref_audio && flags.voice) usageError("give either --ref_audio (with its --ref_text, if any) or --voice, not both");
  if (flags.ref_text && !flags.ref_audio) usageError("--ref_text needs --ref_audio, the clip it transcribes");
  if (flags.ref_audio && flags.ref_text === undefined) {
    usageError("--ref_audio needs its transcript, --ref_text: the JavaScript runtime has no recogniser");
  }
  const backend = flags.backend ?? "node";
  if (!["node", "wasm"].includes(backend)) usageError(`--backend is node or wasm under Node, got ${reprString(backend)}`);
  const output = flags.output ?? "output.wav";
  // Every bad output path fails before any compute.
  for (const file of [output, flags.codes_out, flags.save_voice]) if (file) checkOutputPath(file);
  if (path.extname(output).toLowerCase() !== ".wav") {
    usageError(`--output ${output} needs the extension .wav: the Node CLI writes 16-bit PCM WAV`);
  }
  if (flags.save_voice && fs.existsSync(flags.save_voice)) {
    usageError(`--save_voice ${flags.save_voice} exists; give a new file name (a voice is never saved over a file)`);
  }
  if (flags.save_voice && !(flags.ref_audio || flags.voice)) usageError("--save_voice saves the voice of --ref_audio or of --voice; give one");

  // A bad voice file or clip fails before the model loads.
  let voice = flags.voice ? await Voice.load(flags.voice) : null;
  const clip = flags.ref_audio ? readClip(flags.ref_audio) : null;

  let modelDir = flags.model_dir;
  if (modelDir === undefined) {
    modelDir = DEFAULT_BUILD;
    if (!fs.existsSync(path.join(modelDir, MANIFEST_NAME))) {
      usageError(`no --model_dir given and ${modelDir} holds no build: make it with ` +
        "`python optimize.py --device cpu --include-higgs`, or pass --model_dir DIR");
    }
  }
  const { OmniVoice } = await import("../src/index.mjs");
  const tts = await OmniVoice.load(modelDir, { backend, threads: flags.threads, codec: flags.higgs_dir });
  if (clip) voice = await tts.createVoice({ refAudio: clip, refText: flags.ref_text, preprocessPrompt: settings.preprocessPrompt });
  if (flags.save_voice && voice) {
    const kind = path.extname(flags.save_voice).toLowerCase() === ".pt" ? "pt" : "npz";
    const tmp = writeTemporary(flags.save_voice, voice.toBytes(kind));
    if (!publishNew(tmp, flags.save_voice)) {
      usageError(`--save_voice ${flags.save_voice} appeared while the voice was made; give a new file name`);
    }
    if (!flags.quiet) console.error(`wrote ${flags.save_voice}`);
  }

  const request = { text: flags.text, language: flags.language ?? null, instruct: flags.instruct ?? null, voice,
    duration: flags.duration ?? null, speed: flags.speed ?? null, seed: flags.seed ?? null, ...settings };
  const progress = progressLine(!!flags.quiet);
  const start = performance.now();
  const result = await tts.generate(request, { onProgress: progress.onProgress });
  const elapsed = (performance.now() - start) / 1000;
  progress.done();

  // Both files written under new names first, then put in place: a failure leaves neither half-written.
  const wavTmp = writeTemporary(output, encodeWav(result.audio, result.sampleRate));
  const codesTmp = flags.codes_out ? writeTemporary(flags.codes_out, writeNpy(result.codes.data, [...result.codes.dims])) : null;
  publish(wavTmp, output);
  if (codesTmp) publish(codesTmp, flags.codes_out);
  const seconds = result.audio.length / result.sampleRate;
  if (!flags.quiet) console.error(`wrote ${output} (${seconds.toFixed(2)} s)`);
  console.log(`RTF ${(elapsed / Math.max(seconds, 1e-9)).toFixed(3)} (${elapsed.toFixed(2)} s for ${seconds.toFixed(2)} s of audio)`);
  return 0;
}

/** --ref_audio read and decoded now, so a clip that is no WAV fails before the model loads. @param {string} file */
function readClip(file) {
  if (!fs.existsSync(file) || isFolder(file)) usageError(`audio file not found: ${file}`);
  let bytes;
  try {
    bytes = new Uint8Array(fs.readFileSync(file));
  } catch (error) {
    usageError(`cannot read audio file ${file}: ${/** @type {any} */ (error).code ?? error}`);
  }
  return readWav(bytes, file);
}

/** run_cli: a UserError is `error: ...` and exit 2; anything else one `error:` line and exit 1. @param {string[]} argv */
async function run(argv) {
  const interrupted = () => {
    removeTemporaries();
    process.stderr.write("\nerror: interrupted; nothing was written\n");
    process.exit(130);
  };
  process.on("SIGINT", interrupted);
  process.on("SIGTERM", interrupted);
  try {
    return await main(argv);
  } catch (error) {
    const message = String(/** @type {any} */ (error)?.message ?? error);
    const line = message.split("\n").find((l) => l.trim()) ?? String(error);
    if (error instanceof UserError) {
      console.error(`error: ${line}`);
      return 2;
    }
    console.error(`error: ${line}${process.env.OMNIVOICE_DEBUG ? "" : " (OMNIVOICE_DEBUG=1 shows where)"}`);
    if (process.env.OMNIVOICE_DEBUG) console.error(/** @type {any} */ (error)?.stack);
    return 1;
  } finally {
    removeTemporaries();
  }
}

const invoked = process.argv[1] && fs.realpathSync(process.argv[1]) === fs.realpathSync(fileURLToPath(import.meta.url));
if (invoked) process.exitCode = await run(process.argv.slice(2));
