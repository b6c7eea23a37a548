// How fast the seeded noise draws: one class draw of a 10 s utterance, [8, 250, 1025] float32 uniforms, as
// class_temperature > 0 makes each step. Prints draws per second; asserts nothing.
//   node bench/noise_speed.mjs
import { RandomNoise } from "../src/model/noise.mjs";

const shape = [8, 250, 1025];
const count = shape.reduce((a, b) => a * b, 1);
const noise = new RandomNoise(1234);
noise.uniform(shape); // warm-up
const rounds = 5;
const start = performance.now();
let check = 0;
for (let i = 0; i < rounds; i++) check += noise.uniform(shape)[count - 1];
const seconds = (performance.now() - start) / 1000;
const rate = (rounds * count) / seconds;
console.log(`${count} draws (${shape.join(" x ")}): ${((seconds / rounds) * 1000).toFixed(1)} ms a draw, ` +
  `${(rate / 1e6).toFixed(1)} M draws/s (checksum ${check.toFixed(6)})`);
