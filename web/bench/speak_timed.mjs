// A timed synthesis under Node, printed as one JSON line (codes/checks/web_bench.py reads it):
//   node bench/speak_timed.mjs BUILD --backend node|wasm --threads 2 --text "..." --duration 10 --num_steps 32
import { parseArgs } from "node:util";
import { OmniVoice } from "../src/index.mjs";
import { timedRun } from "./timed_run.mjs";

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: { backend: { type: "string" }, threads: { type: "string" }, text: { type: "string" },
    language: { type: "string" }, duration: { type: "string" }, num_steps: { type: "string" }, seed: { type: "string" } },
});
const number = (/** @type {string | undefined} */ v) => (v === undefined ? undefined : Number(v));
const run = await timedRun(OmniVoice, positionals[0], {
  backend: values.backend, threads: number(values.threads), text: values.text ?? "Hello there.",
  language: values.language, duration: number(values.duration), numSteps: number(values.num_steps),
  seed: number(values.seed),
});
console.log(JSON.stringify({ ...run, max_rss_mb: process.resourceUsage().maxRSS / 1024 }));
