/**
 * Upstream's fixed facts, declared once for the JavaScript runtime (codes/runtime/contract/specs.py; docs/runtime.md,
 * "The build a host loads"): 8 codebooks of 1024 codes, the MASK id 1024, 24 kHz in hops of 960 samples.
 */
export const NUM_CODEBOOKS = 8;
export const CODEBOOK_SIZE = 1024;
export const AUDIO_MASK_ID = 1024;
export const AUDIO_VOCAB_SIZE = CODEBOOK_SIZE + 1;
export const SAMPLE_RATE = 24_000;
export const HOP_LENGTH = 960;
export const FRAME_RATE = SAMPLE_RATE / HOP_LENGTH;
