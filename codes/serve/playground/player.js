// Streamed speech in the page's <audio> element: each piece of 16-bit PCM (24 kHz mono, as the API's
// "pcm" format sends it) is scheduled right after the one before through Web Audio, whose output is the
// element's live source, so playing starts with the first piece while later ones are still being made.
// Once the last piece has played, the element holds the whole result as a WAV file.

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

  seconds() {
    return this.pieces.reduce((total, piece) => total + piece.length, 0) / SAMPLE_RATE;
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
