/**
 * Python's string rules where they differ from JavaScript's, for the ports of codes/runtime/text (docs/runtime.md
 * stages 1-3, 6): white space as str.isspace() and re's \s see it (JS's \s also takes U+FEFF and leaves out
 * U+001C-U+001F and U+0085), str.strip() and str.split(), str.isalnum(), and repr() for the one-line messages.
 * Python counts a string in code points, JavaScript in UTF-16 units: the ports say which they use.
 */

/** The body of a character class of Python's white space (str.isspace, re's \s), for RegExp sources. */
export const SPACE_CLASS = "\\t-\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000";

const SPACE = new RegExp(`^[${SPACE_CLASS}]$`, "u");
const ALL_SPACE = new RegExp(`^[${SPACE_CLASS}]+$`, "u");
const LEADING = new RegExp(`^[${SPACE_CLASS}]+`, "u");
const TRAILING = new RegExp(`[${SPACE_CLASS}]+$`, "u");
const WORDS = new RegExp(`[^${SPACE_CLASS}]+`, "gu");
// str.isalnum() is exactly the letters and numbers (checked over every code point of Python 3.11).
const ALNUM = /^[\p{L}\p{N}]$/u;

/** str.isspace() of one character. @param {string | undefined} char */
export function isSpace(char) {
  return char !== undefined && SPACE.test(char);
}

/** str.isspace() of a string: false for "". @param {string} text */
export function isAllSpace(text) {
  return ALL_SPACE.test(text);
}

/** str.isalnum() of the character (code point) that starts at `index`. @param {string} text @param {number} index */
export function isAlnumAt(text, index) {
  const code = text.codePointAt(index);
  return code !== undefined && ALNUM.test(String.fromCodePoint(code));
}

/** str.strip(). @param {string} text */
export function strip(text) {
  return text.replace(LEADING, "").replace(TRAILING, "");
}

/** str.split() with no separator: the words between runs of white space. @param {string} text */
export function splitWords(text) {
  return text.match(WORDS) ?? [];
}

/** A string's length in code points, as Python's len(). @param {string} text */
export function codePointLength(text) {
  let count = 0;
  for (const _ of text) count++;
  return count;
}

/** Text as RegExp source (u flag) matches it literally: its syntax characters escaped. @param {string} text */
export function escapeRegExp(text) {
  return text.replace(/[\\^$.*+?()[\]{}|/]/g, "\\$&");
}

const PRINTABLE = /^[^\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]$/u;

/** Python's repr() of a string: single quotes unless it holds ' and no ". @param {string} text */
export function reprString(text) {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const char of text) {
    const code = /** @type {number} */ (char.codePointAt(0));
    if (char === quote || char === "\\") out += "\\" + char;
    else if (char === "\t") out += "\\t";
    else if (char === "\n") out += "\\n";
    else if (char === "\r") out += "\\r";
    else if (char === " " || PRINTABLE.test(char)) out += char;
    else if (code < 0x100) out += "\\x" + code.toString(16).padStart(2, "0");
    else if (code < 0x10000) out += "\\u" + code.toString(16).padStart(4, "0");
    else out += "\\U" + code.toString(16).padStart(8, "0");
  }
  return out + quote;
}

/** Python's repr() of a float: the shortest digits, exponent form below 1e-4 and from 1e16. @param {number} value */
export function reprFloat(value) {
  if (Number.isNaN(value)) return "nan";
  if (!Number.isFinite(value)) return value > 0 ? "inf" : "-inf";
  if (value === 0) return Object.is(value, -0) ? "-0.0" : "0.0";
  const [mantissa, exponentText] = value.toExponential().split("e");
  const exponent = Number(exponentText);
  const sign = mantissa.startsWith("-") ? "-" : "";
  const digits = mantissa.replace(/^-/, "").replace(".", "");
  if (exponent < -4 || exponent >= 16) {
    const body = digits.length > 1 ? digits[0] + "." + digits.slice(1) : digits;
    return `${sign}${body}e${exponent < 0 ? "-" : "+"}${String(Math.abs(exponent)).padStart(2, "0")}`;
  }
  if (exponent < 0) return `${sign}0.${"0".repeat(-exponent - 1)}${digits}`;
  const whole = digits.slice(0, exponent + 1).padEnd(exponent + 1, "0");
  return `${sign}${whole}.${digits.slice(exponent + 1) || "0"}`;
}

/** Python's str() of a number (a non-integer as its float repr), or of any other value as JavaScript writes it. @param {any} value */
export function str(value) {
  if (typeof value === "number" && !Number.isInteger(value)) return reprFloat(value);
  if (value === null || value === undefined) return "None";
  return String(value);
}

/**
 * Python's repr() of a value from JSON or a caller: None, True/False, a string's repr, a number (`asFloat`: as a
 * float, 2 -> "2.0", the way a float-typed flag would hold it), a list's items.
 * @param {any} value @param {boolean} [asFloat]
 * @returns {string}
 */
export function repr(value, asFloat = false) {
  if (value === null || value === undefined) return "None";
  if (typeof value === "boolean") return value ? "True" : "False";
  if (typeof value === "string") return reprString(value);
  if (typeof value === "bigint") return value.toString();
  if (typeof value === "number") return Number.isInteger(value) && !asFloat ? String(value) : reprFloat(value);
  if (Array.isArray(value)) return "[" + value.map((item) => repr(item, asFloat)).join(", ") + "]";
  return String(value);
}
