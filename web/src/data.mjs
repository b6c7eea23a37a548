/**
 * The runtime's data files (codes/runtime/data/, reached through the src/data link): the same JSON the Python
 * runtime reads, so a table lives in one place for both hosts (docs/runtime.md, "Data").
 */
import { readJson } from "./files.mjs";

const DATA = new URL("./data/", import.meta.url).href;

/** @type {Map<string, Promise<any>>} */
const loaded = new Map();

/**
 * One data file, read once per process or page.
 * @param {"text_rules" | "duration_weights" | "languages" | "instruct"} name
 * @returns {Promise<any>}
 */
export function dataFile(name) {
  if (!loaded.has(name)) loaded.set(name, readJson(DATA + name + ".json"));
  return /** @type {Promise<any>} */ (loaded.get(name));
}

/** All four, for code that needs them synchronously after one await. */
export async function loadData() {
  const [textRules, durationWeights, languages, instruct] = await Promise.all(
    /** @type {const} */ (["text_rules", "duration_weights", "languages", "instruct"]).map(dataFile));
  return { textRules, durationWeights, languages, instruct };
}
