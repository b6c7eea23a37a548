// The web build's page (issue 60, item 4): speaks in the browser through the site's own omnivoice.mjs (the
// runtime's public API only), plays each piece as it is made, offers the WAV, and keeps the site and its graphs
// in the browser's cache (sw.js) so the next visit works offline. No framework, nothing fetched from elsewhere.

const RUNTIME = new URL("./omnivoice.mjs", import.meta.url).href; // a variable: imported once sw.js holds the page
const SITE = new URL("./", import.meta.url).href; // the build is the site: its manifest and graphs lie beside us
const MB = 1024 * 1024;
const BACKENDS = { wasm: "WebAssembly (CPU)", webgpu: "WebGPU (GPU)" };

/** @typedef {{phase: string, file?: string, loaded?: number, total?: number, step?: number, steps?: number,
 *   chunk?: number, chunks?: number}} Progress */
/** @typedef {{channels: Float32Array[], sampleRate: number}} DecodedAudio */
/** @typedef {{data: BigInt64Array | Int32Array, dims: number[]}} Codes */

/**
 * @template {HTMLElement} T
 * @param {string} id
 * @param {{new (): T, prototype: T}} type
 * @returns {T}
 */
function element(id, type) {
  const found = document.getElementById(id);
  if (!(found instanceof type)) throw new Error(`the page has no #${id}`);
  return found;
}

const ui = {
  error: element("error", HTMLElement),
  isolation: element("isolation", HTMLElement),
  backend: element("backend", HTMLSelectElement),
  backendWhy: element("backend-why", HTMLElement),
  modelProgress: element("model-progress", HTMLProgressElement),
  modelStatus: element("model-status", HTMLElement),
  offline: element("offline", HTMLElement),
  form: element("speak-form", HTMLFormElement),
  text: element("text", HTMLTextAreaElement),
  language: element("language", HTMLInputElement),
  languages: element("languages", HTMLDataListElement),
  designLists: element("design-lists", HTMLElement),
  designSwitches: element("design-switches", HTMLElement),
  instructions: element("instructions", HTMLInputElement),
  clip: element("clip", HTMLInputElement),
  record: element("record", HTMLButtonElement),
  stopRecording: element("stop-recording", HTMLButtonElement),
  clearClip: element("clear-clip", HTMLButtonElement),
  clipStatus: element("clip-status", HTMLElement),
  transcript: element("transcript", HTMLTextAreaElement),
  steps: element("steps", HTMLInputElement),
  guidance: element("guidance", HTMLInputElement),
  speed: element("speed", HTMLInputElement),
  duration: element("duration", HTMLInputElement),
  seed: element("seed", HTMLInputElement),
  positionTemperature: element("position-temperature", HTMLInputElement),
  classTemperature: element("class-temperature", HTMLInputElement),
  denoise: element("denoise", HTMLInputElement),
  speak: element("speak", HTMLButtonElement),
  stop: element("stop", HTMLButtonElement),
  speakProgress: element("speak-progress", HTMLProgressElement),
  speakStatus: element("speak-status", HTMLElement),
  player: element("player", HTMLAudioElement),
  download: element("download", HTMLAnchorElement),
};

/** What the page holds, on window.omnivoice for a console (and the tests): the runtime module, the loaded model,
 * the clip, and the last utterance ({audio, codes, sampleRate, pieces, request, scheduled}). */
const page = {
  /** @type {any} */ module: null,
  /** @type {any} */ tts: null,
  /** @type {any} */ lastResult: null,
  /** @type {{audio: DecodedAudio, seconds: number, name: string} | null} */ clip: null,
  /** @type {AudioContext | null} */ audioContext: null, // made on the first Speak (a click lets it play)
};
/** @type {any} */ (window).omnivoice = page;

let loads = 0; // the latest load wins: a backend picked while another loads replaces it
let kept = false; // the rest of the build asked for, once
/** @type {Player | null} */
let playing = null;
let stopped = false;
/** @type {Map<string, string>} */
const languageIds = new Map(); // a language's name or id, lower case -> its id

/** @param {unknown} error */
function message(error) {
  return error instanceof Error ? error.message : String(error);
}

/** @param {string} text */
function showError(text) {
  ui.error.textContent = text;
}

/** @param {number} bytes */
function megabytes(bytes) {
  return (bytes / MB).toFixed(1);
}

/** @param {HTMLProgressElement} bar @param {number | null} value @param {number} [max] */
function showProgress(bar, value, max = 1) {
  bar.hidden = false;
  if (value === null) {
    bar.removeAttribute("value"); // indeterminate
  } else {
    bar.max = max;
    bar.value = Math.min(value, max);
  }
}

// --- Kept offline: sw.js caches the site and the build ---------------------------------------------------------

/** Registers sw.js and waits until it holds this page, so the runtime and the graphs are fetched through it (and
 * kept); says in one line whether the page is being kept. */
async function keepOffline() {
  if (!("serviceWorker" in navigator)) {
    return "Not kept for offline use: service workers need HTTPS or localhost.";
  }
  try {
    const registration = await navigator.serviceWorker.register("sw.js");
    const firstVisit = registration.installing !== null || registration.waiting !== null;
    if (!navigator.serviceWorker.controller && firstVisit) {
      await new Promise((resolve) => {
        navigator.serviceWorker.addEventListener("controllerchange", resolve, { once: true });
        setTimeout(resolve, 10_000);
      });
    }
  } catch (error) {
    return `Not kept for offline use: ${message(error)}`;
  }
  return navigator.serviceWorker.controller
    ? "Keeping this page for offline use…"
    : "Not kept for offline use this time (the page was loaded past the cache); reload it to keep it.";
}

/** Once the model is loaded, asks sw.js to keep the rest of the build (what this visit has not used yet: the codec,
 * cloning's encoders), and shows how far it is. */
function keepTheRest() {
  const worker = navigator.serviceWorker?.controller;
  if (!worker) return;
  navigator.serviceWorker.addEventListener("message", (event) => {
    const { type, done, count, bytes, error } = event.data ?? {};
    if (type === "keeping") {
      ui.offline.textContent = `Keeping the build for offline use: ${done} of ${count} files…`;
    } else if (type === "kept") {
      ui.offline.textContent = `Kept in this browser (${megabytes(bytes)} MB): the next visit works offline.`;
    } else if (type === "not-kept") {
      ui.offline.textContent = `Not all kept for offline use: ${error}`;
    }
  });
  worker.postMessage({ type: "keep" });
}

// --- The model -------------------------------------------------------------------------------------------------

/** Offers WebGPU where the browser gives an adapter. */
async function offerWebGpu() {
  const gpu = /** @type {any} */ (navigator).gpu;
  if (!gpu) return;
  try {
    if (!(await gpu.requestAdapter())) return;
  } catch {
    return;
  }
  ui.backend.add(new Option(BACKENDS.webgpu, "webgpu"));
}

/** Loads the build on `backend`, showing the bytes as the graphs download. @param {string} backend */
async function load(backend) {
  const ticket = ++loads;
  ui.speak.disabled = true;
  showError("");
  /** @type {Map<string, {loaded: number, total: number}>} */
  const files = new Map();
  const bytes = () => {
    let loaded = 0, total = 0;
    for (const file of files.values()) {
      loaded += file.loaded;
      total += Math.max(file.total, file.loaded);
    }
    return { loaded, total };
  };
  const started = performance.now();
  ui.modelStatus.textContent = `Loading the model on ${BACKENDS[/** @type {keyof BACKENDS} */ (backend)]}…`;
  showProgress(ui.modelProgress, null);
  try {
    const tts = await page.module.OmniVoice.load(SITE, {
      backend,
      threads: crossOriginIsolated ? undefined : 1, // one thread without isolation: no SharedArrayBuffer
      /** @param {Progress} event */
      onProgress(event) {
        if (ticket !== loads || event.phase !== "download") return;
        files.set(event.file ?? "", { loaded: event.loaded ?? 0, total: event.total ?? 0 });
        const { loaded, total } = bytes();
        ui.modelStatus.textContent = `Downloading the model: ${megabytes(loaded)} of ${megabytes(total)} MB`;
        showProgress(ui.modelProgress, loaded, Math.max(total, 1));
      },
    });
    if (ticket !== loads) return;
    page.tts = tts;
    if (ui.languages.options.length <= 1) fillLanguages(tts.languages());
    if (!ui.designLists.childElementCount) fillDesign(tts.designVocabulary());
    const seconds = ((performance.now() - started) / 1000).toFixed(1);
    ui.backendWhy.textContent = tts.why;
    ui.modelStatus.textContent = `Ready: the ${tts.profile} build (${megabytes(bytes().total)} MB) on ` +
      `${BACKENDS[/** @type {keyof BACKENDS} */ (tts.backend)] ?? tts.backend}, loaded in ${seconds} s.`;
    ui.speak.disabled = false;
    if (!kept) {
      kept = true;
      keepTheRest();
    }
  } catch (error) {
    if (ticket !== loads) return;
    page.tts = null;
    ui.modelStatus.textContent = "The model is not loaded.";
    showError(message(error));
  } finally {
    if (ticket === loads) ui.modelProgress.hidden = true;
  }
}

/** @param {{id: string, name: string}[]} languages */
function fillLanguages(languages) {
  for (const { id, name } of languages) {
    ui.languages.append(new Option(name));
    languageIds.set(name.toLowerCase(), id);
    languageIds.set(id.toLowerCase(), id);
  }
}

/** A language id from the Language box (a name or an id, any case), or undefined for Auto. */
function chosenLanguage() {
  const typed = ui.language.value.trim();
  if (!typed || typed.toLowerCase() === "auto") return undefined;
  const id = languageIds.get(typed.toLowerCase());
  if (id === undefined) throw new Error(`unknown language "${typed}": pick one from the Language list, or Auto`);
  return id;
}

/**
 * The Design controls from the vocabulary: one list for categories that exclude each other (accent or dialect),
 * a box for a category of one item (whisper). The chosen items join into Instructions, which stays editable;
 * the runtime writes them as upstream reads them.
 * @param {{name: string, label: string, excludes: string[], items: {value: string, label?: string}[]}[]} categories
 */
function fillDesign(categories) {
  const byName = new Map(categories.map((category) => [category.name, category]));
  const placed = new Set();
  /** @type {(HTMLSelectElement | HTMLInputElement)[]} */
  const controls = [];
  for (const category of categories) {
    if (placed.has(category.name)) continue;
    const group = [category, ...category.excludes.flatMap((name) => byName.get(name) ?? [])];
    group.forEach((member) => placed.add(member.name));
    const id = `design-${category.name}`;
    if (group.length === 1 && category.items.length === 1) {
      const [item] = category.items;
      const box = Object.assign(document.createElement("input"), { type: "checkbox", id, value: item.value });
      const label = Object.assign(document.createElement("label"), { className: "check" });
      const name = item.label ?? item.value;
      label.append(box, ` ${name[0].toUpperCase()}${name.slice(1)}`);
      ui.designSwitches.append(label);
      controls.push(box);
      continue;
    }
    const select = Object.assign(document.createElement("select"), { id });
    select.add(new Option("any", ""));
    for (const member of group) {
      const holder = group.length > 1
        ? Object.assign(document.createElement("optgroup"), { label: member.label })
        : select;
      for (const item of member.items) {
        holder.append(new Option(item.label ? `${item.label} (${item.value})` : item.value, item.value));
      }
      if (holder !== select) select.append(holder);
    }
    const cell = document.createElement("div");
    cell.append(Object.assign(document.createElement("label"), { htmlFor: id, textContent: category.label }), select);
    ui.designLists.append(cell);
    controls.push(select);
  }
  const update = () => {
    ui.instructions.value = controls
      .filter((control) => (control instanceof HTMLInputElement ? control.checked : control.value))
      .map((control) => control.value)
      .join(", ");
  };
  controls.forEach((control) => control.addEventListener("change", update));
}

// --- A reference clip, from a file or the microphone -------------------------------------------------------------

/** A WAV file's own sample rate (so decoding it does not resample), or null for anything else.
 * @param {ArrayBuffer} bytes */
function wavRate(bytes) {
  const view = new DataView(bytes);
  const tag = (/** @type {number} */ at) => String.fromCharCode(...new Uint8Array(bytes, at, 4));
  if (bytes.byteLength < 12 || tag(0) !== "RIFF" || tag(8) !== "WAVE") return null;
  for (let at = 12; at + 8 <= bytes.byteLength; ) {
    const size = view.getUint32(at + 4, true);
    if (tag(at) === "fmt " && at + 16 <= bytes.byteLength) {
      const rate = view.getUint32(at + 12, true);
      return rate >= 3000 && rate <= 768000 ? rate : null;
    }
    at += 8 + size + (size & 1); // chunks are padded to an even length
  }
  return null;
}

/** Any clip the browser decodes, as the runtime takes it: its channels at their own rate (a WAV's), else at 48 kHz
 * (the rate Opus, and so a recording, decodes at); the runtime resamples as the Python runtime does.
 * @param {ArrayBuffer} bytes @returns {Promise<DecodedAudio>} */
async function decodeClip(bytes) {
  const context = new OfflineAudioContext(1, 1, wavRate(bytes) ?? 48000);
  const decoded = await context.decodeAudioData(bytes);
  const channels = Array.from({ length: decoded.numberOfChannels }, (_, i) => decoded.getChannelData(i));
  return { channels, sampleRate: decoded.sampleRate };
}

/** @param {DecodedAudio} audio @param {string} name @param {string} said */
function useClip(audio, name, said) {
  const seconds = audio.channels[0].length / audio.sampleRate;
  page.clip = { audio, seconds, name };
  ui.clipStatus.textContent = `${said} ${seconds.toFixed(1)} s (${name}): Speak clones its voice.`;
  ui.clearClip.disabled = false;
}

function clearClip() {
  page.clip = null;
  ui.clip.value = "";
  ui.clipStatus.textContent = "";
  ui.clearClip.disabled = true;
}

ui.clip.addEventListener("change", async () => {
  const file = ui.clip.files?.[0];
  if (!file) return clearClip();
  showError("");
  try {
    useClip(await decodeClip(await file.arrayBuffer()), file.name, "Clip:");
  } catch (error) {
    clearClip();
    showError(`cannot read ${file.name} as audio: ${message(error)}`);
  }
});

ui.clearClip.addEventListener("click", clearClip);

ui.record.addEventListener("click", async () => {
  showError("");
  /** @type {MediaStream} */
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  } catch (error) {
    showError(`cannot use the microphone: ${message(error)}`);
    return;
  }
  const recorder = new MediaRecorder(stream);
  /** @type {Blob[]} */
  const parts = [];
  const started = performance.now();
  const clock = setInterval(() => {
    ui.clipStatus.textContent = `Recording ${((performance.now() - started) / 1000).toFixed(1)} s`;
  }, 100);
  recorder.addEventListener("dataavailable", (event) => parts.push(event.data));
  recorder.addEventListener("stop", async () => {
    clearInterval(clock);
    stream.getTracks().forEach((track) => track.stop());
    ui.record.disabled = false;
    ui.stopRecording.disabled = true;
    try {
      useClip(await decodeClip(await new Blob(parts).arrayBuffer()), "the microphone", "Recorded");
    } catch (error) {
      showError(`cannot read the recording: ${message(error)}`);
    }
  });
  ui.stopRecording.onclick = () => recorder.stop();
  ui.record.disabled = true;
  ui.stopRecording.disabled = false;
  recorder.start();
});

// --- Speaking ----------------------------------------------------------------------------------------------------

/** Each piece scheduled on the AudioContext right after the one before, as it comes. */
class Player {
  /** @param {AudioContext} context */
  constructor(context) {
    this.context = context;
    this.next = 0;
    /** @type {AudioBufferSourceNode[]} */
    this.sources = [];
    /** @type {{at: number, seconds: number, madeAt: number}[]} when each piece plays, and when it came */
    this.scheduled = [];
  }

  /** @param {Float32Array} samples @param {number} rate */
  play(samples, rate) {
    const buffer = this.context.createBuffer(1, samples.length, rate);
    buffer.getChannelData(0).set(samples);
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.context.destination);
    const at = Math.max(this.next, this.context.currentTime + 0.05);
    source.start(at);
    this.next = at + buffer.duration;
    this.sources.push(source);
    this.scheduled.push({ at, seconds: buffer.duration, madeAt: this.context.currentTime });
  }

  stop() {
    for (const source of this.sources) source.stop();
  }
}

/** @param {HTMLInputElement} input */
function number(input) {
  return input.value === "" ? undefined : Number(input.value);
}

/** The request from the form (the runtime checks it, and says in one line what it refuses). */
function readRequest() {
  const request = /** @type {Record<string, unknown>} */ ({ text: ui.text.value });
  const language = chosenLanguage();
  if (language !== undefined) request.language = language;
  const instruct = ui.instructions.value.trim();
  if (instruct) request.instruct = instruct;
  if (page.clip) {
    request.refAudio = page.clip.audio;
    const said = ui.transcript.value.trim();
    if (said) request.refText = said; // left out: the runtime says why it needs one
  }
  const settings = { numSteps: ui.steps, guidanceScale: ui.guidance, speed: ui.speed, duration: ui.duration,
    positionTemperature: ui.positionTemperature, classTemperature: ui.classTemperature };
  for (const [name, input] of Object.entries(settings)) {
    const value = number(input);
    if (value !== undefined) request[name] = value;
  }
  const seed = ui.seed.value.trim();
  if (seed) request.seed = Number.isSafeInteger(Number(seed)) ? Number(seed) : BigInt(seed);
  if (!ui.denoise.checked) request.denoise = false;
  return request;
}

/** The step counter, one generation's: chunks counted from 1 whether the runtime counts them from 0 or 1. */
function stepCounter() {
  /** @type {number | null} */
  let base = null;
  /** @param {Progress} event */
  return (event) => {
    if (event.phase !== "step" || stopped) return;
    const { step = 0, steps = 1, chunk = 0, chunks = 1 } = event;
    base ??= chunk === 0 ? 1 : 0;
    const part = chunks > 1 ? ` (part ${chunk + base} of ${chunks})` : "";
    ui.speakStatus.textContent = `Speaking: step ${step} of ${steps}${part}`;
    showProgress(ui.speakProgress, (chunk + base - 1) * steps + step, chunks * steps);
  };
}

/** @param {boolean} busy */
function speaking(busy) {
  ui.speak.disabled = busy || !page.tts;
  ui.stop.disabled = !busy;
  ui.backend.disabled = busy;
  if (!busy) ui.speakProgress.hidden = true;
}

ui.form.addEventListener("submit", async (event) => {
  event.preventDefault();
  if (!page.tts) return;
  showError("");
  /** @type {Record<string, unknown>} */
  let request;
  try {
    request = readRequest();
  } catch (error) {
    showError(message(error));
    return;
  }
  page.audioContext ??= new AudioContext();
  await page.audioContext.resume();
  const player = (playing = new Player(page.audioContext));
  stopped = false;
  speaking(true);
  ui.speakStatus.textContent = "Speaking…";
  showProgress(ui.speakProgress, null);
  /** @type {Float32Array[]} */
  const pieces = [];
  /** @type {Codes[]} */
  const codes = [];
  let sampleRate = page.tts.sampleRate;
  const started = performance.now();
  try {
    for await (const piece of page.tts.stream(request, { onProgress: stepCounter() })) {
      if (stopped) break;
      if (!piece.audio.length) continue;
      pieces.push(piece.audio);
      codes.push(piece.codes);
      sampleRate = piece.sampleRate;
      player.play(piece.audio, piece.sampleRate);
    }
    if (stopped) {
      ui.speakStatus.textContent = "Stopped.";
      return;
    }
    finish(pieces, joinCodes(codes), sampleRate, request, player, (performance.now() - started) / 1000);
  } catch (error) {
    ui.speakStatus.textContent = "";
    showError(message(error));
  } finally {
    speaking(false);
  }
});

ui.stop.addEventListener("click", () => {
  stopped = true;
  playing?.stop();
});

/** The pieces' codes joined along time, as one utterance's [8, T] (null where a piece brought none).
 * @param {Codes[]} parts @returns {Codes | null} */
function joinCodes(parts) {
  if (!parts.length || parts.some((part) => !part?.dims)) return null;
  const rows = parts[0].dims[0];
  const frames = parts.reduce((sum, part) => sum + part.dims[1], 0);
  const data = new BigInt64Array(rows * frames);
  let at = 0;
  for (const part of parts) {
    const length = part.dims[1];
    for (let row = 0; row < rows; row++) {
      for (let frame = 0; frame < length; frame++) {
        data[row * frames + at + frame] = BigInt(part.data[row * length + frame]);
      }
    }
    at += length;
  }
  return { data, dims: [rows, frames] };
}

/** The whole utterance into the player and the Download link.
 * @param {Float32Array[]} pieces @param {Codes | null} codes @param {number} sampleRate
 * @param {Record<string, unknown>} request @param {Player} player @param {number} seconds */
function finish(pieces, codes, sampleRate, request, player, seconds) {
  const audio = new Float32Array(pieces.reduce((sum, piece) => sum + piece.length, 0));
  pieces.reduce((at, piece) => (audio.set(piece, at), at + piece.length), 0);
  const wav = page.module.encodeWav(audio, sampleRate);
  if (ui.download.href) URL.revokeObjectURL(ui.download.href);
  const url = URL.createObjectURL(new Blob([wav], { type: "audio/wav" }));
  ui.player.src = url;
  ui.download.href = url;
  ui.player.hidden = ui.download.hidden = false;
  const spoken = audio.length / sampleRate;
  ui.speakStatus.textContent = `Spoke ${spoken.toFixed(1)} s of audio in ${seconds.toFixed(1)} s ` +
    `(${(spoken / seconds).toFixed(2)}x real time).`;
  page.lastResult = { audio, codes, sampleRate, pieces: pieces.length, request, scheduled: player.scheduled };
}

// --- Start -------------------------------------------------------------------------------------------------------

async function start() {
  ui.isolation.hidden = crossOriginIsolated;
  ui.offline.textContent = await keepOffline();
  try {
    page.module = await import(RUNTIME);
  } catch (error) {
    ui.modelStatus.textContent = "The runtime did not load.";
    showError(`cannot load omnivoice.mjs: ${message(error)}`);
    return;
  }
  await offerWebGpu();
  const asked = new URLSearchParams(location.search).get("backend");
  if (asked && [...ui.backend.options].some((option) => option.value === asked)) ui.backend.value = asked;
  ui.backend.addEventListener("change", () => load(ui.backend.value));
  await load(ui.backend.value);
}

start();
