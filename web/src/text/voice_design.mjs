/**
 * Language and voice-design instruct resolution, as upstream's generate() does it: codes/runtime/text/voice_design.py,
 * docs/runtime.md stage 1 (upstream's `_resolve_language`, `_resolve_instruct`).
 *
 * Languages: an id ("en") or a name ("English", any case); an unknown one warns and falls back to language-agnostic
 * mode (null), as upstream does. Instructs: the controlled vocabulary of codes/runtime/data/instruct.json (gender,
 * age, pitch, style, English accents, Chinese dialects); unknown and conflicting items throw UserError in one line.
 */
import { dataFile } from "../data.mjs";
import { UserError } from "../errors.mjs";
import { containsChinese } from "./cleanup.mjs";
import { SPACE_CLASS, reprString, strip } from "./python.mjs";

const LANGUAGES = await dataFile("languages");
const INSTRUCT = await dataFile("instruct");

/** @type {Map<string, string>} */
export const LANGUAGE_NAME_TO_ID = new Map(Object.entries(LANGUAGES.name_to_id));
export const LANGUAGE_IDS = new Set(LANGUAGE_NAME_TO_ID.values());

function instructVocabulary() {
  /** @type {Map<string, string>} */
  const enToZh = new Map();
  /** @type {Set<string>[]} */
  const exclusiveGroups = [];
  for (const category of INSTRUCT.categories) {
    if (category.en_to_zh) {
      for (const [en, zh] of Object.entries(category.en_to_zh)) enToZh.set(en, /** @type {string} */ (zh));
      exclusiveGroups.push(new Set([...Object.keys(category.en_to_zh), ...Object.values(category.en_to_zh)]));
    } else {
      exclusiveGroups.push(new Set(category.items));
    }
  }
  const zhToEn = new Map([...enToZh].map(([en, zh]) => [zh, en]));
  const valid = new Set(exclusiveGroups.flatMap((group) => [...group]));
  return { enToZh, zhToEn, exclusiveGroups, valid };
}

const VOCABULARY = instructVocabulary();
export const INSTRUCT_EN_TO_ZH = VOCABULARY.enToZh;
export const INSTRUCT_ZH_TO_EN = VOCABULARY.zhToEn;
export const INSTRUCT_EXCLUSIVE_GROUPS = VOCABULARY.exclusiveGroups;
export const INSTRUCT_VALID = VOCABULARY.valid;
export const INSTRUCT_VALID_EN = new Set([...INSTRUCT_VALID].filter((item) => !containsChinese(item)));
export const INSTRUCT_VALID_ZH = new Set([...INSTRUCT_VALID].filter((item) => containsChinese(item)));
// Sorted, so the suggestion never depends on a set's order (every item is in the BMP: unit order is code point order).
const SUGGESTION_POOL = [...INSTRUCT_VALID].sort();

/**
 * Upstream's voice-design vocabulary by category, for a page to build its controls from: each category's `name`,
 * `label` and the categories it `excludes`; each item's `value` (what an instruct says), its Chinese form `zh` where
 * it has one, and for a dialect its English `label`. How chosen items join into an instruct is resolveInstruct's.
 */
export function designVocabulary() {
  return INSTRUCT.categories.map((/** @type {any} */ category) => {
    const labels = category.item_labels ?? {};
    const chinese = category.en_to_zh ?? {};
    const values = category.en_to_zh ? Object.keys(category.en_to_zh) : category.items;
    const items = values.map((/** @type {string} */ item) => ({
      value: item,
      ...(Object.hasOwn(chinese, item) ? { zh: chinese[item] } : {}),
      ...(Object.hasOwn(labels, item) ? { label: labels[item] } : {}),
    }));
    return { name: category.name, label: category.label, excludes: category.excludes ?? [], items };
  });
}

// Upstream's lang_display_name: str.title() but for these (apostrophes, "de", "del").
/** @type {Record<string, string>} */
const TITLE_EXCEPTIONS = {
  "fe'fe'": "Fe'fe'",
  "dũya": "Dũya",
  "santiago del estero quichua": "Santiago del Estero Quichua",
  "santa ana de tusi pasco quechua": "Santa Ana de Tusi Pasco Quechua",
  "malinaltepec me'phaa": "Malinaltepec Me'phaa",
  "tlacoapa me'phaa": "Tlacoapa Me'phaa",
};

const CASED = /^\p{Cased}$/u;

/** Python's str.title(): a cased character after a cased one is lower case, any other upper. @param {string} text */
function title(text) {
  let out = "";
  let previousIsCased = false;
  for (const char of text) {
    out += previousIsCased ? char.toLowerCase() : char.toUpperCase();
    previousIsCased = CASED.test(char);
  }
  return out;
}

/** Every language as {id, name}, named and sorted as upstream's demo lists them. */
export function languageChoices() {
  const named = [...LANGUAGE_NAME_TO_ID].map(([name, id]) => ({ id, name: TITLE_EXCEPTIONS[name] ?? title(name) }));
  return named.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

/**
 * A language id for the prompt, or null for language-agnostic mode. An unknown language warns through `warn`
 * (console.warn when none is given), as Python's logger does.
 * @param {string | null | undefined} language @param {(message: string) => void} [warn]
 * @returns {string | null}
 */
export function resolveLanguage(language, warn) {
  if (language === null || language === undefined || language.toLowerCase() === "none") return null;
  if (LANGUAGE_IDS.has(language)) return language;
  const id = LANGUAGE_NAME_TO_ID.get(language.toLowerCase());
  if (id !== undefined) return id;
  (warn ?? console.warn)(
    `Language ${reprString(language)} is not recognized (use an id such as 'en', 'zh', 'ja' or a name such as ` +
    "'English'); falling back to language-agnostic mode.");
  return null;
}

/**
 * Python's difflib.SequenceMatcher(None, a, b).ratio() over code points: twice the matched characters over both
 * lengths, the matches found as Ratcliff/Obershelp finds them (the longest match, then the same on each side), with
 * difflib's autojunk (b of 200 or more: its characters found more than 1% of the time are no anchors).
 * @param {string} aText @param {string} bText
 */
export function sequenceRatio(aText, bText) {
  const a = Array.from(aText);
  const b = Array.from(bText);
  /** @type {Map<string, number[]>} */
  const b2j = new Map();
  b.forEach((elt, j) => {
    const indices = b2j.get(elt);
    if (indices) indices.push(j);
    else b2j.set(elt, [j]);
  });
  if (b.length >= 200) {
    const ntest = Math.floor(b.length / 100) + 1;
    for (const [elt, indices] of [...b2j]) if (indices.length > ntest) b2j.delete(elt);
  }

  /** @param {number} alo @param {number} ahi @param {number} blo @param {number} bhi @returns {[number, number, number]} */
  function longestMatch(alo, ahi, blo, bhi) {
    let besti = alo;
    let bestj = blo;
    let bestsize = 0;
    /** @type {Map<number, number>} */
    let j2len = new Map();
    for (let i = alo; i < ahi; i++) {
      /** @type {Map<number, number>} */
      const newJ2len = new Map();
      for (const j of b2j.get(a[i]) ?? []) {
        if (j < blo) continue;
        if (j >= bhi) break;
        const k = (j2len.get(j - 1) ?? 0) + 1;
        newJ2len.set(j, k);
        if (k > bestsize) {
          besti = i - k + 1;
          bestj = j - k + 1;
          bestsize = k;
        }
      }
      j2len = newJ2len;
    }
    // No junk without isjunk: only the extension over equal (popular) characters remains.
    while (besti > alo && bestj > blo && a[besti - 1] === b[bestj - 1]) {
      besti--;
      bestj--;
      bestsize++;
    }
    while (besti + bestsize < ahi && bestj + bestsize < bhi && a[besti + bestsize] === b[bestj + bestsize]) bestsize++;
    return [besti, bestj, bestsize];
  }

  let matches = 0;
  const queue = [[0, a.length, 0, b.length]];
  while (queue.length > 0) {
    const [alo, ahi, blo, bhi] = /** @type {number[]} */ (queue.pop());
    const [i, j, k] = longestMatch(alo, ahi, blo, bhi);
    if (k) {
      matches += k;
      if (alo < i && blo < j) queue.push([alo, i, blo, j]);
      if (i + k < ahi && j + k < bhi) queue.push([i + k, ahi, j + k, bhi]);
    }
  }
  const length = a.length + b.length;
  return length ? 2.0 * matches / length : 1.0;
}

/**
 * The closest valid instruct item, as difflib.get_close_matches(item, pool, n=1, cutoff=0.6) picks it: the highest
 * ratio of at least 0.6, a tie going to the item that sorts last; null when none is that close.
 * @param {string} item @returns {string | null}
 */
export function suggestInstructItem(item) {
  let best = null;
  let bestRatio = -1;
  for (const candidate of SUGGESTION_POOL) {
    // difflib's SequenceMatcher holds the word as b and each candidate as a.
    const ratio = sequenceRatio(candidate, item);
    if (ratio >= 0.6 && (ratio > bestRatio || (ratio === bestRatio && best !== null && candidate > best))) {
      best = candidate;
      bestRatio = ratio;
    }
  }
  return best;
}

/** @param {string} instruct @param {[string, string][]} unknown */
function unsupportedItemsMessage(instruct, unknown) {
  const problems = unknown.map(([raw, item]) => {
    const suggestion = suggestInstructItem(item);
    const hint = suggestion ? `unsupported; did you mean '${suggestion}'?` : "unsupported";
    return `'${raw}' -> '${item}' (${hint})`;
  });
  return `unsupported instruct items in ${reprString(instruct)}: ${problems.join("; ")}. ` +
    `Valid English items: ${[...INSTRUCT_VALID_EN].sort().join(", ")}. ` +
    `Valid Chinese items: ${[...INSTRUCT_VALID_ZH].sort().join("，")}. ` +
    "Use only English items separated by comma + space (e.g. 'male, indian accent') " +
    "or only Chinese items separated by a full-width comma (e.g. '男，河南话').";
}

const ITEM_SEPARATOR = new RegExp(`[${SPACE_CLASS}]*[,，][${SPACE_CLASS}]*`, "u");

/**
 * A voice-design instruct validated and written in one language with its separator. Items may be separated by ","
 * or "，" and match in any case. A dialect forces Chinese, an accent English; otherwise `useZh` (the target text
 * holds Chinese) decides. null for an empty instruct.
 * @param {string | null | undefined} instruct @param {boolean} [useZh]
 * @returns {string | null}
 */
export function resolveInstruct(instruct, useZh = false) {
  if (instruct === null || instruct === undefined || !strip(instruct)) return null;
  instruct = strip(instruct);
  const rawItems = instruct.split(ITEM_SEPARATOR).filter((raw) => raw);

  /** @type {string[]} */
  let items = [];
  /** @type {[string, string][]} */
  const unknown = [];
  for (const raw of rawItems) {
    const item = strip(raw).toLowerCase();
    if (INSTRUCT_VALID.has(item)) items.push(item);
    else unknown.push([raw, item]);
  }
  if (unknown.length > 0) throw new UserError(unsupportedItemsMessage(instruct, unknown));

  const hasDialect = items.some((item) => item.endsWith("话"));
  const hasAccent = items.some((item) => item.includes(" accent"));
  if (hasDialect && hasAccent) {
    throw new UserError(`instruct ${reprString(instruct)} mixes a Chinese dialect with an English accent: ` +
      "dialects are for Chinese speech, accents for English speech; keep one");
  }
  if (hasDialect || hasAccent) useZh = hasDialect;

  const translation = useZh ? INSTRUCT_EN_TO_ZH : INSTRUCT_ZH_TO_EN;
  items = items.map((item) => translation.get(item) ?? item);

  const conflicts = INSTRUCT_EXCLUSIVE_GROUPS.map((group) => items.filter((item) => group.has(item)))
    .filter((hits) => hits.length > 1);
  if (conflicts.length > 0) {
    const described = conflicts.map((hits) => hits.map((hit) => `'${hit}'`).join(" vs ")).join("; ");
    throw new UserError(`conflicting instruct items within the same category: ${described}; each category ` +
      "(gender, age, pitch, style, accent, dialect) allows at most one item");
  }

  const separator = items.some((item) => containsChinese(item)) ? "，" : ", ";
  return items.join(separator);
}
