// The Script tab: speakers with a voice each, a script typed or loaded from a file, spoken through
// POST /v1/audio/script as it streams (progress, the track in timeline order), then the audio and the captions
// to download. The voices offered are the Speak tab's list (the server's), plus a design and auto.

import { base64Of, speakScript } from "./api.js";
import { StreamPlayer } from "./player.js";

const $ = (id) => document.getElementById(id);
const FORMATS = {
  ".srt": "srt", ".vtt": "vtt", ".jsonl": "jsonl", ".txt": "text", ".md": "markdown", ".markdown": "markdown",
  ".html": "html", ".htm": "html", ".xhtml": "html", ".epub": "epub",
};
let player = null;
let epub = null; // an EPUB picked: its bytes in base64, sent in place of the text box (a zip is no text)
let captionsUrl = null;
let rows = 0; // speakers ever added: each row's controls get a number of their own

// A book's chapters, each a button that plays from where its first speech starts.
function showChapters(book) {
  const list = $("script-chapters");
  list.replaceChildren();
  list.hidden = !book;
  if (!book) return;
  for (const chapter of book.chapters) {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    const minutes = Math.floor(chapter.start / 60);
    const seconds = String(Math.floor(chapter.start % 60)).padStart(2, "0");
    button.textContent = `${chapter.title} (${minutes}:${seconds})`;
    button.addEventListener("click", () => { $("script-player").currentTime = chapter.start; $("script-player").play(); });
    item.append(button);
    list.append(item);
  }
}

// The voice picker's options: the server's voices as the Speak tab lists them, then a design and auto.
function voiceOptions() {
  const options = [...$("voice").options].map((option) => new Option(option.text, option.value));
  options.push(new Option("Designed voice (describe it below)", "instruct:"), new Option("Auto: the model picks", "auto"));
  return options;
}

function addSpeaker(name = "", voice = "") {
  rows += 1;
  const row = document.createElement("li");
  row.className = "speaker";
  const number = $("speakers").children.length + 1;
  row.innerHTML = `
    <label for="speaker-name-${rows}">Speaker ${number} name</label>
    <input id="speaker-name-${rows}" type="text" maxlength="64" spellcheck="false" data-name>
    <label for="speaker-voice-${rows}">Speaker ${number} voice</label>
    <select id="speaker-voice-${rows}" data-voice></select>
    <label for="speaker-design-${rows}" hidden>Speaker ${number} design</label>
    <input id="speaker-design-${rows}" type="text" maxlength="500" spellcheck="false" hidden data-design-text
           placeholder="female, low pitch, british accent">
    <button type="button" data-remove>Remove speaker ${number}</button>`;
  row.querySelector("[data-name]").value = name;
  const select = row.querySelector("[data-voice]");
  select.dataset.wanted = voice; // picked once the server's voices are listed, if they are not yet
  select.replaceChildren(...voiceOptions());
  if (voice) select.value = voice;
  const design = row.querySelector("[data-design-text]");
  const showDesign = () => {
    const designed = select.value === "instruct:";
    design.hidden = !designed;
    row.querySelector(`label[for="${design.id}"]`).hidden = !designed;
  };
  select.addEventListener("change", () => {
    select.dataset.wanted = select.value;
    showDesign();
  });
  showDesign();
  row.querySelector("[data-remove]").addEventListener("click", () => row.remove());
  $("speakers").append(row);
}

// Each row's voice picker again, keeping what was picked (the server's voice list may have changed).
function refreshVoices() {
  $("speakers").querySelectorAll("[data-voice]").forEach((select) => {
    const picked = select.dataset.wanted || select.value;
    select.replaceChildren(...voiceOptions());
    if ([...select.options].some((option) => option.value === picked)) select.value = picked;
    select.dispatchEvent(new Event("change"));
  });
}

// The request's speakers: name -> voice, in the order listed; the page's own checks, before any call.
function speakers() {
  const declared = {};
  for (const row of $("speakers").children) {
    const name = row.querySelector("[data-name]").value.trim();
    let voice = row.querySelector("[data-voice]").value;
    if (!name) throw new Error("give every speaker a name (or remove the row)");
    if (voice === "instruct:") {
      const design = row.querySelector("[data-design-text]").value.trim();
      if (!design) throw new Error(`describe ${name}'s designed voice, e.g. "female, low pitch"`);
      voice = `instruct:${design}`;
    }
    declared[name] = voice;
  }
  return declared;
}

function showProgress(done, total, words) {
  const bar = $("script-progress");
  bar.hidden = false;
  bar.max = Math.max(total, 1);
  bar.value = done;
  $("script-progress-label").textContent = words;
}

function selectTab(tab) {
  document.querySelectorAll('[role="tab"]').forEach((other) => {
    const selected = other === tab;
    other.setAttribute("aria-selected", String(selected));
    other.tabIndex = selected ? 0 : -1;
    $(other.getAttribute("aria-controls")).hidden = !selected;
  });
  if (tab.id === "tab-script") refreshVoices();
}

// timesWords(): whether the server times words (its defaults, once loaded): the word-captions box shows then.
export function setupScript(guarded, loadServer, timesWords) {
  document.querySelectorAll('[role="tab"]').forEach((tab) => tab.addEventListener("click", () => guarded(async () => {
    if (tab.id === "tab-script" && !$("voice").value) await loadServer();
    $("caption-words-label").hidden = !timesWords();
    selectTab(tab);
  })));
  $("add-speaker").addEventListener("click", () => addSpeaker());
  addSpeaker("Alice", "nova");
  addSpeaker("Bob", "ash");

  $("script-file").addEventListener("change", () => guarded(async () => {
    const file = $("script-file").files[0];
    if (!file) return;
    const suffix = file.name.slice(file.name.lastIndexOf(".")).toLowerCase();
    $("script-format").value = FORMATS[suffix] || "text";
    epub = FORMATS[suffix] === "epub" ? await base64Of(file) : null;
    $("script-text").readOnly = epub !== null;
    $("script-text").value = epub !== null ? `${file.name}: an EPUB of ${Math.round(file.size / 1024)} KB, read on the server`
      : await file.text();
  }));
  $("script-format").addEventListener("change", () => {
    if ($("script-format").value !== "epub" && epub !== null) {
      epub = null;
      $("script-text").readOnly = false;
      $("script-text").value = "";
    }
  });

  $("script-form").addEventListener("submit", (event) => {
    event.preventDefault();
    $("script-download").hidden = $("captions-download").hidden = true;
    if (player) player.stop();
    player = new StreamPlayer($("script-player"));
    player.start(); // in the click itself: the browser lets audio start only from a user's action
    guarded(async () => {
      try {
        const captions = $("captions-format").value;
        const format = $("script-format").value;
        if (format === "epub" && epub === null) throw new Error("pick the EPUB with Script file");
        const request = { script: format === "epub" ? epub : $("script-text").value, format, speakers: speakers(),
          response_format: "pcm", captions };
        if ($("gap").value && request.format !== "srt" && request.format !== "vtt") request.gap = Number($("gap").value);
        if ($("script-steps").value) request.num_steps = Number($("script-steps").value);
        if ($("script-seed").value) request.seed = Number($("script-seed").value);
        if (timesWords() && $("caption-words").checked) request.caption_words = true;
        showProgress(0, 1, "Reading the script");
        const done = await speakScript(request, {
          onStarted: (started) => showProgress(0, started.segments, `0 of ${started.segments} segments`),
          onProgress: (placed, total) => showProgress(placed, total, `${placed} of ${total} segments, ${player.received()}`),
          onAudio: (bytes) => player.push(bytes),
        });
        const total = done.segments.length;
        showChapters(done.book);
        showProgress(total, total, `${total} of ${total} segments, ${done.duration.toFixed(1)} s: playing`);
        const link = $("script-download");
        link.href = await player.finish();
        link.hidden = false;
        if (captionsUrl) URL.revokeObjectURL(captionsUrl);
        captionsUrl = URL.createObjectURL(new Blob([done.captions], { type: captions === "vtt" ? "text/vtt" : "text/plain" }));
        Object.assign($("captions-download"), { href: captionsUrl, download: `script.${captions}`, hidden: false });
        showProgress(total, total, `${total} of ${total} segments, ${done.duration.toFixed(1)} s`);
      } catch (error) {
        player.stop();
        $("script-progress").hidden = true;
        $("script-progress-label").textContent = "";
        throw error;
      }
    }, $("speak-script"));
  });
}
