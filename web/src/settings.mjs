/**
 * Every generation setting in one place for the JavaScript side, with upstream's defaults: the camelCase twin of
 * codes/runtime/contract/settings.py (GenerationSettings). The API, the CLI and a build's manifest
 * ("decoding_defaults", snake_case) all go through settingsFrom, so a bad value is refused with Python's one-line
 * message, which names the setting as inference.py's flag does (num_steps, not numSteps).
 */
import { UserError } from "./errors.mjs";
import { FRAME_RATE } from "./text/duration.mjs";
import { repr } from "./text/python.mjs";

/**
 * @typedef {{numSteps: number, guidanceScale: number, tShift: number, layerPenaltyFactor: number,
 *   positionTemperature: number, classTemperature: number, denoise: boolean, preprocessPrompt: boolean,
 *   postprocessOutput: boolean, audioChunkDuration: number, audioChunkThreshold: number, padDuration: number,
 *   fadeDuration: number}} GenerationSettings
 */

/** @type {Readonly<GenerationSettings>} */
export const DEFAULT_SETTINGS = Object.freeze({
  numSteps: 32, // decoding steps; each reveals part of the masked target
  guidanceScale: 2.0, // classifier-free guidance; 0 turns it off
  tShift: 0.1, // < 1 reveals few cells early and many late
  layerPenaltyFactor: 5.0, // score penalty per codebook index: coarse codebooks first
  positionTemperature: 5.0, // Gumbel noise on which cells to reveal; 0 = deterministic
  classTemperature: 0.0, // Gumbel sampling of the token values; 0 = argmax
  denoise: true, // prepend <|denoise|> when there is a reference
  preprocessPrompt: true, // trim silence from the reference, end its text with punctuation
  postprocessOutput: true, // remove long silences from the output
  audioChunkDuration: 15.0, // seconds per chunk for long text
  audioChunkThreshold: 30.0, // chunk only when the estimate is longer than this (s)
  padDuration: 0.1, // silence added on each side of the output (s)
  fadeDuration: 0.1, // fade-in/out length (s)
});

/** camelCase -> inference.py's snake_case flag name, for every setting. @type {Readonly<Record<keyof GenerationSettings, string>>} */
export const SNAKE_CASE = Object.freeze({
  numSteps: "num_steps",
  guidanceScale: "guidance_scale",
  tShift: "t_shift",
  layerPenaltyFactor: "layer_penalty_factor",
  positionTemperature: "position_temperature",
  classTemperature: "class_temperature",
  denoise: "denoise",
  preprocessPrompt: "preprocess_prompt",
  postprocessOutput: "postprocess_output",
  audioChunkDuration: "audio_chunk_duration",
  audioChunkThreshold: "audio_chunk_threshold",
  padDuration: "pad_duration",
  fadeDuration: "fade_duration",
});

/** snake_case -> camelCase, the other way. @type {Readonly<Record<string, keyof GenerationSettings>>} */
export const CAMEL_CASE = Object.freeze(Object.fromEntries(
  Object.entries(SNAKE_CASE).map(([camel, snake]) => [snake, /** @type {keyof GenerationSettings} */ (camel)])));

// Upstream's OmniVoiceGenerationConfig spells the steps `num_step`; the recipe's flag is --num_steps.
/** @type {Readonly<Record<string, keyof GenerationSettings>>} */
export const ALIASES = Object.freeze({ num_step: "numSteps", numStep: "numSteps" });

// The numbers a user may set for one run or one request, and their types (inference.py's flags).
/** @type {Readonly<Record<string, "int" | "float">>} */
export const TUNABLE = Object.freeze({ numSteps: "int", guidanceScale: "float", tShift: "float",
  layerPenaltyFactor: "float", positionTemperature: "float", classTemperature: "float" });
// The switches, as upstream's CLIs take them (--denoise false), and what each turns on.
/** @type {Readonly<Record<string, string>>} */
export const SWITCHES = Object.freeze({
  denoise: "the <|denoise|> token when cloning",
  preprocessPrompt: "silence trimming of the reference clip and end punctuation on its transcript",
  postprocessOutput: "removal of long silences from the output",
});
export const CHUNKING = Object.freeze(["audioChunkDuration", "audioChunkThreshold"]);
// Our negated switches (--no_denoise), kept beside upstream's.
const NEGATED = Object.freeze({ denoise: "no_denoise", postprocessOutput: "no_postprocess" });

/** @type {[keyof GenerationSettings, (value: number) => boolean, string][]} */
const RULES = [
  ["guidanceScale", () => true, "a finite number"],
  ["tShift", (v) => v > 0, "> 0"],
  ["layerPenaltyFactor", () => true, "a finite number"],
  ["positionTemperature", (v) => v >= 0, ">= 0 (0 turns the noise off)"],
  ["classTemperature", (v) => v >= 0, ">= 0 (0 means argmax)"],
  ["audioChunkDuration", (v) => v > 0, "> 0 seconds"],
  ["audioChunkThreshold", (v) => v >= 0, ">= 0 seconds"],
  ["padDuration", (v) => v >= 0, ">= 0 seconds"],
  ["fadeDuration", (v) => v >= 0, ">= 0 seconds"],
];

/**
 * Settings checked as GenerationSettings.__post_init__ checks them. @param {GenerationSettings} settings
 * @returns {Readonly<GenerationSettings>}
 */
export function checkSettings(settings) {
  for (const name of /** @type {const} */ (["denoise", "preprocessPrompt", "postprocessOutput"])) {
    if (typeof settings[name] !== "boolean") {
      throw new UserError(`${SNAKE_CASE[name]} must be true or false, got ${repr(settings[name])}`);
    }
  }
  const steps = settings.numSteps;
  if (typeof steps !== "number" || !Number.isInteger(steps) || steps < 1) {
    throw new UserError(`num_steps must be a whole number >= 1, got ${repr(steps)}`);
  }
  for (const [name, isValid, wanted] of RULES) {
    const value = /** @type {any} */ (settings[name]);
    if (typeof value !== "number" || !Number.isFinite(value) || !isValid(value)) {
      throw new UserError(`${SNAKE_CASE[name]} must be ${wanted}, got ${repr(value, true)}`);
    }
  }
  return Object.freeze({ ...settings });
}

/**
 * Settings from `values` (camelCase, or snake_case as a manifest's "decoding_defaults" and the CLI spell them),
 * the rest from `base` (the defaults), validated. An undefined value is one not given; an unknown name is refused.
 * @param {Record<string, any>} [values] @param {Readonly<GenerationSettings>} [base]
 * @returns {Readonly<GenerationSettings>}
 */
export function settingsFrom(values = {}, base = DEFAULT_SETTINGS) {
  /** @type {Record<string, any>} */
  const changes = {};
  const unknown = [];
  for (const [name, value] of Object.entries(values)) {
    if (value === undefined) continue;
    const key = Object.hasOwn(SNAKE_CASE, name) ? name : (CAMEL_CASE[name] ?? ALIASES[name]);
    if (key === undefined || !Object.hasOwn(SNAKE_CASE, key)) unknown.push(name);
    else changes[key] = value;
  }
  if (unknown.length > 0) throw new UserError(`unknown generation setting(s): ${unknown.sort().join(", ")}`);
  return checkSettings({ ...base, ...changes });
}

// What a generate() request holds besides settings (synthesis.py generate's named arguments, camelCase).
export const REQUEST_FIELDS = Object.freeze(["text", "language", "instruct", "refAudio", "refText", "voice",
  "duration", "speed", "numFrames", "normalizeText", "seed"]);

/**
 * A request's settings over `base`, as generate(text, ..., **settings_overrides) takes them: every field but the
 * request's own (REQUEST_FIELDS) is a setting, and an unknown one is refused.
 * @param {Record<string, any>} request @param {Readonly<GenerationSettings>} [base]
 */
export function settingsOfRequest(request, base = DEFAULT_SETTINGS) {
  return settingsFrom(Object.fromEntries(Object.entries(request).filter(([name]) => !REQUEST_FIELDS.includes(name))), base);
}

/**
 * The settings a build's manifest names as its defaults ("decoding_defaults", snake_case), or the defaults here.
 * @param {Record<string, any> | null | undefined} decodingDefaults
 */
export function manifestDefaults(decodingDefaults) {
  return decodingDefaults ? settingsFrom(decodingDefaults) : DEFAULT_SETTINGS;
}

/** The longest target one work item may have: one chunk (upstream chunks anything longer). @param {GenerationSettings} settings */
export function maxItemFrames(settings) {
  return Math.trunc(settings.audioChunkThreshold * FRAME_RATE);
}

/** upstream's str2bool: yes/true/t/y/1 and no/false/f/n/0. @param {string} value */
export function trueOrFalse(value) {
  const word = value.trim().toLowerCase();
  if (["yes", "true", "t", "y", "1"].includes(word)) return true;
  if (["no", "false", "f", "n", "0"].includes(word)) return false;
  throw new UserError(`expected true or false, got ${repr(value)}`);
}

/**
 * Settings from parsed CLI flags by inference.py's names (num_steps, denoise true/false, no_denoise, no_postprocess;
 * undefined: not given), as settings_from_flags makes them: a switch and its negation both given are refused.
 * @param {Record<string, any>} flags
 */
export function settingsFromFlags(flags) {
  /** @type {Record<string, any>} */
  const values = {};
  for (const name of [...Object.keys(TUNABLE), ...CHUNKING]) {
    const flag = SNAKE_CASE[/** @type {keyof GenerationSettings} */ (name)];
    if (flags[flag] !== undefined) values[name] = flags[flag];
  }
  for (const name of Object.keys(SWITCHES)) {
    const flag = SNAKE_CASE[/** @type {keyof GenerationSettings} */ (name)];
    const negatedFlag = /** @type {Record<string, string>} */ (NEGATED)[name];
    let given = flags[flag];
    if (typeof given === "string") given = trueOrFalse(given);
    const negated = negatedFlag ? !!flags[negatedFlag] : false;
    if (given !== undefined && given !== null && negated && given) {
      throw new UserError(`--${flag} true and --${negatedFlag} contradict each other; give one`);
    }
    if ((given !== undefined && given !== null) || negated) values[name] = !!given && !negated;
  }
  return settingsFrom(values);
}
