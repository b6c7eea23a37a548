/**
 * The conformance vectors (tests/conformance/, docs/runtime.md "The vectors"): loading a stage's file and
 * comparing a JS result with a case's expected value, past the file's tolerance, with the same rules as
 * codes/checks/conformance.py (exact integers, "inf"/"-inf"/"nan" strings, decimal strings for big seeds).
 */
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath } from "node:url";

export const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..", "..");
export const VECTORS = path.join(ROOT, "tests", "conformance");

/** @param {string} stage @returns {{stage: string, tolerance: number, cases: {name: string, inputs: any, expected: any}[]}} */
export function vector(stage) {
  return JSON.parse(fs.readFileSync(path.join(VECTORS, stage + ".json"), "utf8"));
}

/** @param {any} value */
function special(value) {
  if (value === "inf") return Infinity;
  if (value === "-inf") return -Infinity;
  if (value === "nan") return NaN;
  return value;
}

/**
 * Every difference between `actual` and `expected`, as "path: actual vs expected" lines; [] when they agree.
 * Numbers agree within `tolerance` (0: exactly); typed arrays compare as arrays; bigints as their decimals.
 * @param {any} actual @param {any} expected @param {number} tolerance @param {string} [where]
 * @returns {string[]}
 */
export function differences(actual, expected, tolerance, where = "") {
  if (ArrayBuffer.isView(actual)) actual = Array.from(/** @type {any} */ (actual));
  if (typeof actual === "bigint") actual = typeof expected === "string" ? actual.toString() : Number(actual);
  if (Array.isArray(expected)) {
    if (!Array.isArray(actual) || actual.length !== expected.length) {
      return [`${where}: length ${Array.isArray(actual) ? actual.length : typeof actual} vs ${expected.length}`];
    }
    const found = [];
    for (let i = 0; i < expected.length && found.length < 5; i++) {
      found.push(...differences(actual[i], expected[i], tolerance, `${where}[${i}]`));
    }
    return found;
  }
  if (expected !== null && typeof expected === "object") {
    if (actual === null || typeof actual !== "object") return [`${where}: ${JSON.stringify(actual)} vs an object`];
    const found = [];
    for (const key of Object.keys(expected)) {
      found.push(...differences(actual[key], expected[key], tolerance, `${where}.${key}`));
    }
    return found;
  }
  const want = special(expected);
  const got = typeof actual === "boolean" && typeof want === "number" ? Number(actual) : actual;
  if (typeof want === "number" && typeof got === "number") {
    if (Number.isNaN(want) ? Number.isNaN(got) : got === want || Math.abs(got - want) <= tolerance) return [];
    return [`${where}: ${got} vs ${want}`];
  }
  return got === want ? [] : [`${where}: ${JSON.stringify(got)} vs ${JSON.stringify(want)}`];
}
