// The page's state: the voice list, the design items, speaking, cloning and deleting, and errors shown
// in the alert. Every call goes through api.js; nothing here knows more of the server than a client does.

import {
  ApiError, base64Of, deleteVoice, designInstructions, designVocabulary, listLanguages, listModels, listVoices,
  saveVoice, serverDefaults, speakStream, storeKey, storedKey,
} from "./api.js";
import { EncodedPlayer, StreamPlayer } from "./player.js";
import { setupScript } from "./script.js";

const $ = (id) => document.getElementById(id);
// The Format select's values are the API's response formats; WAV is made in the page from "pcm".
const CONTENT_TYPES = { mp3: "audio/mpeg", aac: "audio/aac", opus: "audio/ogg", flac: "audio/flac" };
let player = null; // the last Speak's player
let model = "omnivoice";
let recording = null; // {recorder, startedAt, timer} while the microphone records
let recorded = null; // the last recording: {blob, filename}
let languageIds = null; // a language's name or id, lower case -> its id, once the server has listed them
let transcribes = false; // the server transcribes clips sent without their transcript (GET /v1/audio/defaults)
let wordTimings = false; // the server times each word it speaks (GET /v1/audio/defaults): the page highlights them
let highlighting = null; // the animation frame that follows the player's clock over the words
let keyTimer = null; // a reload of what the key opens, shortly after the typing stops

// --- errors and the key -----------------------------------------------------------------------

function showError(error) {
  if (error instanceof ApiError && error.status === 401) {
    $("key-form").hidden = false;
    $("key").focus();
  }
  const status = error instanceof ApiError && error.status ? `${error.status}: ` : "";
  $("error").textContent = `${status}${error.message}`;
}

function clearError() {
  $("error").textContent = "";
}

// Runs an action, showing what fails; the buttons in `busy` are disabled meanwhile (Delete voice then
// follows the voice picked, which the action may have changed).
async function guarded(action, ...busy) {
  clearError();
  busy.forEach((button) => { button.disabled = true; });
  try {
    return await action();
  } catch (error) {
    showError(error);
  } finally {
    busy.forEach((button) => { button.disabled = false; });
    updateDelete();
  }
}

// The key in the box is the key every request sends (api.js reads it at each call), from the first
// keystroke: pressing Speak right after typing it needs no "Use key" first.
function useKey() {
  clearTimeout(keyTimer);
  storeKey($("key").value.trim());
}

$("key").addEventListener("input", () => {
  useKey();
  keyTimer = setTimeout(() => guarded(loadServer), 400);
});

$("key").addEventListener("change", () => {
  useKey();
  guarded(loadServer);
});

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  useKey();
  guarded(loadServer);
});

// What the key opens: the voices, and once the languages, the design vocabulary and the server's defaults.
async function loadServer() {
  await loadVoices();
  if (languageIds === null) await loadLanguages();
}

// --- voices -----------------------------------------------------------------------------------

async function loadVoices(selected) {
  const voices = await listVoices();
  const select = $("voice");
  const keep = selected || select.value;
  select.replaceChildren(...voices.map((voice) => {
    const option = new Option(voice.kind === "design" ? `${voice.name} (${voice.instruct})` : voice.name, voice.id);
    option.dataset.kind = voice.kind || "saved";
    return option;
  }));
  if (voices.some((voice) => voice.id === keep)) select.value = keep;
  $("saved-voices").replaceChildren(...voices.filter((voice) => voice.kind !== "design").map((voice) => {
    const item = document.createElement("li");
    item.textContent = voice.kind === "imported" ? `${voice.name} (imported with --voices-from: read-only)` : voice.name;
    return item;
  }));
  if (!$("saved-voices").children.length) $("saved-voices").append(Object.assign(document.createElement("li"), {
    textContent: "none yet: clone one above",
  }));
  updateDelete();
  $("key-form").hidden = !storedKey();
  const models = await listModels();
  if (models.length && !models.includes(model)) model = models[0];
}

function updateDelete() {
  const option = $("voice").selectedOptions[0];
  $("delete").disabled = !option || option.dataset.kind !== "saved";  // built-in and imported voices stay
}

$("voice").addEventListener("change", updateDelete);

$("delete").addEventListener("click", () => guarded(async () => {
  const id = $("voice").value;
  if (!window.confirm(`Delete the voice "${id}" from the server?`)) return;
  await deleteVoice(id);
  await loadVoices();
}, $("delete")));

// --- languages and settings ---------------------------------------------------------------

async function loadLanguages() {
  const [languages, defaults, design] = await Promise.all([listLanguages(), serverDefaults(), designVocabulary()]);
  fillDesign(design);
  $("languages").replaceChildren(new Option("Auto", "Auto"), ...languages.map((language) => new Option("", language.name)));
  const ids = new Map(languages.map((language) => [language.name.toLowerCase(), language.id]));
  languages.forEach((language) => ids.set(language.id.toLowerCase(), language.id));
  $("steps").placeholder = `${defaults.num_steps}`;
  $("guidance").placeholder = `${defaults.guidance_scale}`;
  $("denoise").checked = defaults.denoise;
  $("preprocess").checked = defaults.preprocess_prompt;
  $("postprocess").checked = defaults.postprocess_output;
  $("normalize").checked = defaults.normalize_text;
  transcribes = defaults.transcribes_clips === true;  // the build has a recogniser: a clip may come alone
  wordTimings = defaults.word_timings === true;
  $("transcript-hint").hidden = !transcribes;
  if (transcribes) $("transcript").setAttribute("aria-describedby", "transcript-hint");
  else $("transcript").removeAttribute("aria-describedby");
  languageIds = ids;
}

// The Language box's id for the request: null for Auto (or empty), else a name or id from the list.
function languageId() {
  const typed = $("language").value.trim();
  if (!typed || typed.toLowerCase() === "auto") return null;
  const id = languageIds && languageIds.get(typed.toLowerCase());
  if (!id) throw new Error(`unknown language "${typed}": pick one from the Language list, or Auto`);
  return id;
}

// --- design -----------------------------------------------------------------------------------

// Upstream's controlled vocabulary, as the server lists it (GET /v1/audio/voice-design): a list per category,
// categories that exclude each other in one list, a box for a category of one item. The chosen items are
// joined by the server, as the runtime reads them (POST /v1/audio/voice-design).
let designControls = []; // the lists and boxes, in the vocabulary's order
let designAsked = 0; // the latest join asked for: an older answer is dropped

function optionOf(item) {
  return new Option(item.label ? `${item.value} (${item.label})` : item.value, item.value);
}

function fillDesign(categories) {
  const byName = new Map(categories.map((category) => [category.name, category]));
  const placed = new Set();
  designControls = [];
  const lists = [];
  const switches = [];
  for (const category of categories) {
    if (placed.has(category.name)) continue;
    const shared = [category, ...category.excludes.map((name) => byName.get(name)).filter((other) => other && !placed.has(other.name))];
    shared.forEach((member) => placed.add(member.name));
    if (shared.length === 1 && category.items.length === 1) {
      const box = Object.assign(document.createElement("input"), { type: "checkbox", value: category.items[0].value });
      const label = Object.assign(document.createElement("label"), { className: "check" });
      const word = category.items[0].value;
      label.append(box, ` ${word[0].toUpperCase()}${word.slice(1)}`);
      switches.push(label);
      designControls.push(box);
      continue;
    }
    const select = Object.assign(document.createElement("select"), { id: `design-${category.name}` });
    select.append(new Option("Any", ""));
    if (shared.length === 1) select.append(...category.items.map(optionOf));
    else for (const member of shared) {
      const group = Object.assign(document.createElement("optgroup"), { label: member.label });
      group.append(...member.items.map(optionOf));
      select.append(group);
    }
    const cell = document.createElement("div");
    cell.append(Object.assign(document.createElement("label"), { htmlFor: select.id, textContent: category.label }), select);
    lists.push(cell);
    designControls.push(select);
  }
  $("design-lists").replaceChildren(...lists);
  $("design-switches").replaceChildren(...switches);
  designControls.forEach((control) => control.addEventListener("change", () => guarded(joinDesign)));
}

async function joinDesign() {
  const items = designControls.map((control) => (control.type === "checkbox" ? (control.checked ? control.value : "") : control.value))
    .filter(Boolean);
  const asked = ++designAsked;
  const instructions = await designInstructions(items);
  if (asked === designAsked) $("instructions").value = instructions;
}

// --- speaking ---------------------------------------------------------------------------------

// Sentences as the page counts them for the progress bar: the server cuts at the same marks, but may
// split the first sentence into clauses and join short later ones, so the bar is a guide, not its count.
function sentenceCount(text) {
  const sentences = text.split(/(?<=[.!?…])\s+|(?<=[。！？])/u).filter((part) => part.trim());
  return Math.max(sentences.length, 1);
}

function showProgress(done, total, words) {
  const bar = $("progress");
  bar.max = total;
  bar.value = done;
  bar.hidden = false;
  $("progress-label").hidden = false;
  $("progress-label").textContent = words;
}

function hideProgress() {
  $("progress").hidden = true;
  $("progress-label").hidden = true;
}

function speechRequest(format) {
  const request = {
    model, input: $("text").value, voice: $("voice").value, response_format: format === "wav" ? "pcm" : format,
    speed: Number($("speed").value) || 1, denoise: $("denoise").checked, preprocess_prompt: $("preprocess").checked,
    postprocess_output: $("postprocess").checked, normalize_text: $("normalize").checked,
  };
  const language = languageId();
  if (language) request.language = language;
  for (const [id, field] of [["steps", "num_steps"], ["guidance", "guidance_scale"], ["duration", "duration"]]) {
    const value = $(id).value;
    if (value) request[field] = Number(value);
  }
  const instructions = $("instructions").value.trim();
  if (instructions) request.instructions = instructions;
  if (wordTimings) request.word_timings = true;
  return request;
}

// --- words, highlighted as they are heard -------------------------------------------------------

// A piece's words, as the server timed them, each a span that says when it is heard.
function showWords(timing) {
  for (const word of timing.words || []) {
    const span = Object.assign(document.createElement("span"), { textContent: word.word });
    span.dataset.start = word.start;
    span.dataset.end = word.end;
    $("words").append(span, " ");
  }
  $("words").hidden = !$("words").children.length;
}

// Marks the word being heard (aria-current), following the player's clock until it stops. A word stays
// marked until a later word starts (a pause after it keeps it lit); words aligned to one instant are marked
// together, and each is marked for at least a few frames, so none is skipped.
const LAST_WORD_SECONDS = 0.25;
const SHORTEST_MARK_SECONDS = 0.1;

function followWords(current) {
  cancelAnimationFrame(highlighting);
  const tick = () => {
    const at = current.position();
    const spans = [...$("words").children];
    const starts = spans.map((span) => Number(span.dataset.start));
    spans.forEach((span, i) => {
      const later = starts.slice(i + 1).find((start) => start > starts[i]);
      const until = Math.max(later ?? Math.max(Number(span.dataset.end), starts[i] + LAST_WORD_SECONDS),
        starts[i] + SHORTEST_MARK_SECONDS);
      if (at >= starts[i] && at < until) span.setAttribute("aria-current", "true");
      else span.removeAttribute("aria-current");
    });
    if (player === current) highlighting = requestAnimationFrame(tick);
  };
  highlighting = requestAnimationFrame(tick);
}

$("speak-form").addEventListener("submit", (event) => {
  event.preventDefault();
  speak(async () => ({}), $("speak"));
});

// Speaks the form's text, with what `extra()` adds to the request (a clip), streaming into the player.
function speak(extra, button) {
  $("download").hidden = true;
  const format = $("format").value;
  if (player) player.stop();
  player = format === "wav" ? new StreamPlayer($("player")) : new EncodedPlayer($("player"), CONTENT_TYPES[format]);
  player.start(); // in the click itself: the browser lets audio start only from a user's action
  guarded(async () => {
    try {
      if (!$("voice").value || languageIds === null) await loadServer();
      const request = { ...speechRequest(format), ...await extra() };
      const total = sentenceCount(request.input);
      let pieces = 0;
      showProgress(0, total, `0 of ${total} sentences`);
      $("words").replaceChildren();
      $("words").hidden = true;
      followWords(player);
      await speakStream(request, (bytes) => {
        player.push(bytes);
        pieces += 1;
        const done = Math.min(pieces, total - 1); // the last one is done only when the server says so
        showProgress(done, total, `${done} of ${total} sentences, ${player.received()}`);
      }, undefined, showWords);
      showProgress(total, total, `${total} of ${total} sentences, ${player.received()}: playing`);
      const link = $("download");
      link.href = await player.finish();
      link.download = `speech.${format}`;
      link.hidden = false;
    } catch (error) {
      player.stop();
      throw error;
    } finally {
      hideProgress();
    }
  }, button);
}

// --- cloning ----------------------------------------------------------------------------------

$("record").addEventListener("click", () => guarded(async () => {
  if (!navigator.mediaDevices) {
    throw new Error("the microphone works only on a secure page: open this one at localhost or 127.0.0.1, "
      + "or behind HTTPS");
  }
  const stream = await navigator.mediaDevices.getUserMedia({ audio: true });
  const recorder = new MediaRecorder(stream);
  const chunks = [];
  recorder.ondataavailable = (event) => chunks.push(event.data);
  recorder.onstop = () => {
    stream.getTracks().forEach((track) => track.stop());
    const blob = new Blob(chunks, { type: recorder.mimeType });
    recorded = { blob, filename: `recording.${recorder.mimeType.includes("ogg") ? "ogg" : "webm"}` };
    $("clip").value = "";
    $("recording").textContent = `Recorded ${((Date.now() - recording.startedAt) / 1000).toFixed(1)} s`;
    clearInterval(recording.timer);
    recording = null;
  };
  recorder.start();
  recording = { recorder, startedAt: Date.now() };
  recording.timer = setInterval(() => {
    $("recording").textContent = `Recording ${((Date.now() - recording.startedAt) / 1000).toFixed(1)} s`;
  }, 100);
  $("record").disabled = true;
  $("stop").disabled = false;
}));

$("stop").addEventListener("click", () => {
  if (recording) recording.recorder.stop();
  $("record").disabled = false;
  $("stop").disabled = true;
});

$("clip").addEventListener("change", () => {
  recorded = null;
  $("recording").textContent = "";
});

// The clip picked or recorded, and its transcript; the page's own checks, before any call.
function clipAndTranscript() {
  const file = $("clip").files[0];
  const clip = file ? { blob: file, filename: file.name } : recorded;
  if (!clip) throw new Error("choose a reference clip or record one first");
  const transcript = $("transcript").value.trim();
  if (!transcript && !transcribes) throw new Error("type what the clip says in Transcript");
  return { clip, transcript };  // an empty transcript: the server's recogniser hears it
}

// A one-off clone: the clip rides in the speech request (ref_audio) and the server keeps nothing.
$("speak-clip").addEventListener("click", () => speak(async () => {
  const { clip, transcript } = clipAndTranscript();
  return { ref_audio: await base64Of(clip.blob), ...(transcript ? { ref_text: transcript } : {}) };
}, $("speak-clip")));

$("clone-form").addEventListener("submit", (event) => {
  event.preventDefault();
  guarded(async () => {
    const { clip, transcript } = clipAndTranscript();
    const name = $("name").value.trim();
    if (!name) throw new Error("give the voice a name in Voice name");
    const saved = await saveVoice(name, transcript, clip.blob, clip.filename);
    const heard = transcript ? "" : ` Heard: "${saved.transcript}".`;
    $("saved").textContent = `Saved the voice "${saved.id}".${heard}`;
    await loadVoices(saved.id);
  }, $("save"));
});

// --- start ------------------------------------------------------------------------------------

$("key").value = storedKey();
guarded(loadServer);

setupScript(guarded, loadServer, () => wordTimings);
