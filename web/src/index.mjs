/** The omnivoice-onnx JavaScript runtime: what a program imports (docs/web.md). */
export { OmniVoice, SAMPLE_RATE } from "./synthesis.mjs";
export { useOnnxRuntime } from "./contract/backends.mjs";
export { UserError } from "./errors.mjs";
export { Voice } from "./voices/voice.mjs";
export { encodeWav, readWav } from "./audio/wav.mjs";
export { writeNpy } from "./audio/npy.mjs";
