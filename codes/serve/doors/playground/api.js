// The public API, as any client calls it: the key from local storage as a Bearer token, and every
// error envelope ({"error": {"message", "code", ...}}) turned into an ApiError with its message.

const KEY_ITEM = "omnivoice-api-key";

export class ApiError extends Error {
  constructor(status, message, code) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function storedKey() {
  return localStorage.getItem(KEY_ITEM) || "";
}

export function storeKey(key) {
  if (key) localStorage.setItem(KEY_ITEM, key);
  else localStorage.removeItem(KEY_ITEM);
}

async function call(method, path, body, signal) {
  const headers = {};
  const key = storedKey();
  if (key) headers.Authorization = `Bearer ${key}`;
  if (body !== undefined && !(body instanceof FormData)) {
    headers["Content-Type"] = "application/json";
    body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path, { method, headers, body, signal });
  } catch (error) {
    if (error.name === "AbortError") throw error;
    throw new ApiError(0, `the server cannot be reached (${error.message})`, "unreachable");
  }
  if (!response.ok) throw await errorOf(response);
  return response;
}

async function errorOf(response) {
  let message = `${response.status} ${response.statusText}`;
  let code = null;
  try {
    const envelope = await response.json();
    if (envelope.error && envelope.error.message) {
      message = envelope.error.message;
      code = envelope.error.code;
    }
  } catch {
    // not JSON (a proxy's page): the status line says it
  }
  return new ApiError(response.status, message, code);
}

export async function listVoices() {
  const response = await call("GET", "/v1/audio/voices");
  return (await response.json()).voices;
}

// Every language the model knows, [{id, name}] sorted by name (upstream's demo's names).
export async function listLanguages() {
  const response = await call("GET", "/v1/audio/languages");
  return (await response.json()).languages;
}

// What a speech request that leaves a setting out gets: the server's generation settings and normalize_text.
export async function designVocabulary() {
  const response = await call("GET", "/v1/audio/voice-design");
  return (await response.json()).categories;
}

// The chosen vocabulary items as the instruct the runtime reads (the server joins them: resolve_instruct).
export async function designInstructions(items) {
  const response = await call("POST", "/v1/audio/voice-design", { items });
  return (await response.json()).instructions;
}

export async function serverDefaults() {
  const response = await call("GET", "/v1/audio/defaults");
  return response.json();
}

// A clip's bytes as base64, for a speech request's ref_audio.
export function base64Of(blob) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(reader.result.slice(reader.result.indexOf(",") + 1)); // after "data:...;base64,"
    reader.onerror = () => reject(new Error(`the file cannot be read (${reader.error})`));
    reader.readAsDataURL(blob);
  });
}

export async function listModels() {
  const response = await call("GET", "/v1/audio/models");
  return (await response.json()).models.map((model) => model.id);
}

export async function saveVoice(name, transcript, clip, filename) {
  const form = new FormData();
  form.append("file", clip, filename);
  if (transcript) form.append("text", transcript);  // left out: the server transcribes the clip
  form.append("name", name);
  const response = await call("POST", "/v1/audio/voices", form);
  return response.json();
}

export async function deleteVoice(id) {
  const response = await call("DELETE", `/v1/audio/voices/${encodeURIComponent(id)}`);
  return response.json();
}

// The server-sent events of a response, each parsed, as they arrive.
async function* eventsOf(response) {
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let pending = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    pending += value;
    let end;
    while ((end = pending.indexOf("\n\n")) >= 0) {
      const event = parseEvent(pending.slice(0, end));
      pending = pending.slice(end + 2);
      if (event !== null) yield event;
    }
  }
}

// POST /v1/audio/speech with stream_format "sse": calls onAudio(bytes) with each speech.audio.delta's
// audio as it arrives (one piece of the text each), onTiming(timing) with each piece's timing (its words too,
// where asked), and resolves with the done event's usage; an `error` event (a failure after the first audio)
// rejects with its message.
export async function speakStream(request, onAudio, signal, onTiming = () => {}) {
  const response = await call("POST", "/v1/audio/speech", { ...request, stream_format: "sse" }, signal);
  for await (const event of eventsOf(response)) {
    if (event.type === "speech.audio.delta") onAudio(fromBase64(event.audio));
    else if (event.type === "speech.audio.timing") onTiming(event);
    else if (event.type === "speech.audio.done") return event.usage;
    else if (event.type === "error") throw new ApiError(500, event.error.message, event.error.code);
  }
  throw new ApiError(0, "the stream ended before the speech was done; try again", "stream_cut");
}

// POST /v1/audio/script with stream_format "sse": onStarted(event) once the script is planned, onProgress(done,
// total) as each segment is placed, onAudio(bytes) with the track in timeline order; resolves with the done event
// (its segments and captions).
export async function speakScript(request, { onStarted, onProgress, onAudio }, signal) {
  const response = await call("POST", "/v1/audio/script", { ...request, stream_format: "sse" }, signal);
  for await (const event of eventsOf(response)) {
    if (event.type === "script.started") onStarted(event);
    else if (event.type === "script.progress") onProgress(event.done, event.total);
    else if (event.type === "script.audio.delta") onAudio(fromBase64(event.audio));
    else if (event.type === "script.done") return event;
    else if (event.type === "error") throw new ApiError(500, event.error.message, event.error.code);
  }
  throw new ApiError(0, "the stream ended before the script was done; try again", "stream_cut");
}

function parseEvent(block) {
  const data = block.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trim());
  return data.length ? JSON.parse(data.join("\n")) : null;
}

function fromBase64(text) {
  const raw = atob(text);
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}
