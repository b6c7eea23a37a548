// Streamed speech in the page's <audio> element, two ways:
// - StreamPlayer (WAV): each piece of 16-bit PCM (24 kHz mono, as the API's "pcm" format sends it) is
//   scheduled right after the one before through Web Audio, whose output is the element's live source,
//   so playing starts with the first piece while later ones are still being made. Once the last piece
//   has played, the element holds the whole result as a WAV file.
// - EncodedPlayer (the API's other formats): the bytes as they come, which join into one file, into a
//   MediaSource where the browser takes the format (mp3, aac in Chromium), else played once complete
//   (Opus in Ogg, and FLAC, whose bytes all come at the end anyway).
// Both: start() in the click, push(bytes) per piece, finish() -> the whole file's URL once it has played.

export const SAMPLE_RATE = 24000;
const LEAD = 0.05; // seconds: room to schedule the first piece without clipping its start

export class StreamPlayer {
  constructor(audio) {
    this.audio = audio;
    this.context = null;
    this.url = null;
  }

  // Called from the click that starts speaking: a browser lets a page start audio only after one.
  start() {
    this.stop();
    this.context = new AudioContext();
    this.output = this.context.createMediaStreamDestination();
    this.pieces = [];
    this.nextAt = 0;
    this.firstAt = null; // the context's time the first piece starts playing at
    this.playing = 0;
    this.ended = false;
    this.whenPlayed = new Promise((resolve) => { this.played = resolve; });
    this.audio.removeAttribute("src");
    this.audio.load();
  }

  push(bytes) {
    const samples = new Int16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >> 1);
    if (!samples.length) return;
    if (!this.pieces.length) { // the player's clock starts with the first audio, not with the request
      this.audio.srcObject = this.output.stream;
      this.audio.play().catch(() => {}); // an autoplay refusal leaves the finished file to play by hand
    }
    this.pieces.push(samples);
    const buffer = this.context.createBuffer(1, samples.length, SAMPLE_RATE);
    const channel = buffer.getChannelData(0);
    for (let i = 0; i < samples.length; i++) channel[i] = samples[i] / 32768;
    const source = this.context.createBufferSource();
    source.buffer = buffer;
    source.connect(this.output);
    this.nextAt = Math.max(this.nextAt, this.context.currentTime + LEAD);
    if (this.firstAt === null) this.firstAt = this.nextAt;
    source.start(this.nextAt);
    this.nextAt += buffer.duration;
    this.playing += 1;
    source.onended = () => {
      this.playing -= 1;
      this.settle();
    };
  }

  // No more pieces: resolves with the whole result's blob URL once everything scheduled has played.
  async finish() {
    this.ended = true;
    this.settle();
    await this.whenPlayed;
    const wav = new Blob([wavHeader(this.pieces), ...this.pieces], { type: "audio/wav" });
    this.release();
    this.url = URL.createObjectURL(wav);
    this.audio.srcObject = null;
    this.audio.src = this.url;
    return this.url;
  }

  settle() {
    if (this.ended && this.playing === 0) this.played();
  }

  // Seconds of the result heard so far: the context's clock while it streams, then the finished file's.
  position() {
    if (this.context && this.firstAt !== null) return Math.max(0, this.context.currentTime - this.firstAt);
    return this.audio.currentTime;
  }

  received() {
    return `${(this.pieces.reduce((total, piece) => total + piece.length, 0) / SAMPLE_RATE).toFixed(1)} s of audio`;
  }

  stop() {
    this.release();
    if (this.url) URL.revokeObjectURL(this.url);
    this.url = null;
    this.audio.srcObject = null;
  }

  release() {
    if (this.context) this.context.close();
    this.context = null;
  }
}

export class EncodedPlayer {
  constructor(audio, type) {
    this.audio = audio;
    this.type = type;
    this.url = null;
  }

  start() {
    this.stop();
    this.parts = [];
    this.appended = Promise.resolve();
    if (!window.MediaSource || !MediaSource.isTypeSupported(this.type)) return;
    this.source = new MediaSource();
    const opened = new Promise((resolve) => this.source.addEventListener("sourceopen", resolve, { once: true }));
    this.appended = opened.then(() => {
      this.buffer = this.source.addSourceBuffer(this.type);
      this.buffer.mode = "sequence"; // pieces follow each other, whatever timestamps a format carries
    });
    this.url = URL.createObjectURL(this.source);
    this.audio.srcObject = null;
    this.audio.src = this.url;
    this.audio.play().catch(() => {}); // waits for the first bytes; a refusal leaves the player to the user
  }

  push(bytes) {
    this.parts.push(bytes);
    if (this.source) this.appended = this.appended.then(() => this.append(bytes));
  }

  append(bytes) {
    return new Promise((resolve, reject) => {
      const done = (event) => {
        this.buffer.removeEventListener("updateend", done);
        this.buffer.removeEventListener("error", done);
        if (event.type === "error") reject(new Error(`this browser cannot play the ${this.type} it was sent`));
        else resolve();
      };
      this.buffer.addEventListener("updateend", done);
      this.buffer.addEventListener("error", done);
      this.buffer.appendBuffer(bytes);
    });
  }

  async finish() {
    const file = new Blob(this.parts, { type: this.type });
    if (this.source) {
      await this.appended;
      this.source.endOfStream();
      if (!this.audio.paused) { // until it has played, or the user pauses it
        await new Promise((resolve) => ["ended", "pause"].forEach((name) => this.audio.addEventListener(name, resolve,
          { once: true })));
      }
      URL.revokeObjectURL(this.url);
    }
    this.url = URL.createObjectURL(file);
    const playing = !this.source;
    this.source = null;
    this.audio.src = this.url;
    if (playing) this.audio.play().catch(() => {}); // it could not play while it streamed: it plays now
    return this.url;
  }

  position() {
    return this.audio.currentTime;
  }

  received() {
    return `${Math.round(this.parts.reduce((total, part) => total + part.byteLength, 0) / 1024)} KB`;
  }

  stop() {
    if (this.url) URL.revokeObjectURL(this.url);
    this.url = null;
    this.source = null;
  }
}

function wavHeader(pieces) {
  const dataBytes = pieces.reduce((total, piece) => total + piece.byteLength, 0);
  const header = new DataView(new ArrayBuffer(44));
  const text = (at, value) => [...value].forEach((char, i) => header.setUint8(at + i, char.charCodeAt(0)));
  text(0, "RIFF");
  header.setUint32(4, 36 + dataBytes, true);
  text(8, "WAVE");
  text(12, "fmt ");
  header.setUint32(16, 16, true); // PCM format chunk
  header.setUint16(20, 1, true); // integer samples
  header.setUint16(22, 1, true); // mono
  header.setUint32(24, SAMPLE_RATE, true);
  header.setUint32(28, SAMPLE_RATE * 2, true);
  header.setUint16(32, 2, true);
  header.setUint16(34, 16, true);
  text(36, "data");
  header.setUint32(40, dataBytes, true);
  return header.buffer;
}
