/**
 * web/src/voices (prompt_file.mjs, npz.mjs, voice.mjs) and web/src/audio/npy.mjs: voices round-trip through both
 * formats, are told apart by content, and every hostile file is refused in one line that names it, before
 * anything in it runs or any size it claims is allocated. (tests/web/test_js_voices.py holds these against the
 * Python side's files and messages.)
 */
import test from "node:test";
import assert from "node:assert/strict";
import { zipSync } from "fflate";
import { Voice } from "../src/voices/voice.mjs";
import {
  MAX_ELEMENTS, MAX_FILE_BYTES, MAX_FRAMES, PromptFileError, crc32, isPromptFile, promptBytes, readPrompt, storedZip,
  zipEntries,
} from "../src/voices/prompt_file.mjs";
import { readNpz } from "../src/voices/npz.mjs";
import { npyHeader, readNpy, writeNpy } from "../src/audio/npy.mjs";
import { UserError } from "../src/errors.mjs";
import { OP, dict, float, global, int, int64Bytes, memberOf, ptFile, str, tensor, withMember } from "./tools/pickles.mjs";

const TEXT = "This is what the reference clip says.";

/** Codes [8, frames] from a small LCG: any values in 0..1023. @param {number} frames @param {number} [seed] */
function codesOf(frames, seed = 1) {
  const out = new Int32Array(8 * frames);
  let state = seed;
  for (let i = 0; i < out.length; i++) {
    state = (state * 1103515245 + 12345) % 2147483648;
    out[i] = state % 1024;
  }
  return out;
}

/** The one-line message a hostile file is refused with; it names the file. @param {() => any} read @param {string} [name] */
function refused(read, name = "hostile.pt") {
  try {
    read();
  } catch (error) {
    assert.ok(error instanceof UserError, `a UserError, got ${error}`);
    const message = /** @type {Error} */ (error).message;
    assert.ok(!message.includes("\n") && message.includes(name), message);
    return message;
  }
  assert.fail("read, not refused");
}

/** A voice prompt's pickle, with fields changed. @param {Record<string, number[] | null>} [changes] */
function promptPickle(changes = {}, frames = 50) {
  /** @type {Record<string, number[] | null>} */
  const fields = { format_version: int(1), ref_audio_tokens: tensor({ numel: 8 * frames, shape: [8, frames] }),
    ref_text: str(TEXT), ref_rms: float(0.1), ...changes };
  return dict(/** @type {[string, number[]][]} */ (Object.entries(fields).filter(([, v]) => v !== null)));
}

/** A .pt of that pickle over one int64 storage. */
function promptFile(changes = {}, frames = 50, storage = int64Bytes(codesOf(frames))) {
  return ptFile(promptPickle(changes, frames), { 0: storage });
}

test("a voice round-trips through .pt and .npz with its codes, text and rms, and is told apart by content", () => {
  for (const rms of [0.0473, 0.31, null]) {
    const voice = new Voice(codesOf(77, 3), 77, "Ünïcödé text, 中文, 😀.", rms);
    for (const kind of /** @type {const} */ (["pt", "npz"])) {
      const bytes = voice.toBytes(kind);
      assert.equal(isPromptFile(bytes), kind === "pt");
      const again = Voice.fromBytes(bytes, `x.${kind === "pt" ? "npz" : "pt"}`); // the name never decides
      assert.deepEqual(again.codes, voice.codes);
      assert.equal(again.frames, 77);
      assert.equal(again.text, voice.text);
      assert.equal(again.rms, rms);
    }
  }
  const one = new Voice(codesOf(1), 1, TEXT, 0.5);
  assert.deepEqual(promptBytes(one.codes, 1, TEXT, 0.5), one.toBytes("pt")); // the same voice, the same bytes
});

test("a .pt's storages start on 64-byte boundaries, as torch aligns them for mmap", () => {
  const bytes = new Voice(codesOf(30), 30, TEXT, 0.2).toBytes("pt");
  const view = new DataView(bytes.buffer);
  for (const entry of zipEntries(bytes)) {
    const start = entry.offset + 30 + view.getUint16(entry.offset + 26, true) + view.getUint16(entry.offset + 28, true);
    assert.equal(start % 64, 0, entry.name);
  }
});

test("wyoming-piper's ref.rvq (no format_version), int32 storages and tensors that are views read as int64 codes", () => {
  const codes = codesOf(40, 5);
  const plain = ptFile(promptPickle({ format_version: null }, 40), { 0: int64Bytes(codes) });
  assert.deepEqual(readPrompt(plain, "ref.rvq").codes, codes);
  // a view: the last 40 frames of an int32 [8, 80] storage, offset 40, row stride 80
  const wide = new Int32Array(8 * 80);
  for (let c = 0; c < 8; c++) for (let t = 0; t < 40; t++) wide[c * 80 + 40 + t] = codes[c * 40 + t];
  const view = ptFile(promptPickle({ format_version: null,
    ref_audio_tokens: tensor({ storage: "IntStorage", numel: 640, shape: [8, 40], stride: [80, 1], offset: 40 }) }, 40),
  { 0: new Uint8Array(wide.buffer) });
  assert.deepEqual(readPrompt(view, "ref.rvq").codes, codes);
  // a transpose: storage [40, 8], read with strides (1, 8)
  const transposed = new Array(320);
  for (let c = 0; c < 8; c++) for (let t = 0; t < 40; t++) transposed[t * 8 + c] = codes[c * 40 + t];
  const t = ptFile(promptPickle({ ref_audio_tokens: tensor({ numel: 320, shape: [8, 40], stride: [1, 8] }) }, 40),
    { 0: int64Bytes(transposed) });
  assert.deepEqual(readPrompt(t, "ref.rvq").codes, codes);
  // big-endian storages, as a big-endian host's torch.save writes them
  const big = new Uint8Array(320 * 8);
  codes.forEach((v, i) => new DataView(big.buffer).setBigInt64(i * 8, BigInt(v), false));
  assert.deepEqual(readPrompt(ptFile(promptPickle({}, 40), { 0: big }, "big"), "big.pt").codes, codes);
});

test("a pickle that asks for os.system is refused by name, before any call is made", () => {
  const evil = [...global("posix", "system"), ...str("touch pwned"), 0x85, ...OP.reduce];
  for (const where of ["ref_audio_tokens", "ref_text", "format_version"]) {
    const message = refused(() => readPrompt(promptFile({ [where]: evil }), "hostile.pt"));
    assert.match(message, /asks for the global posix\.system, which a voice prompt never needs \(refused, nothing was run\)/);
  }
  // the same through Voice.fromBytes, and for builtins that look harmless
  for (const [module, name] of [["builtins", "eval"], ["torch._utils", "_rebuild_parameter"], ["torch", "BFloat16Storage"],
    ["numpy.core.multiarray", "_reconstruct"]]) {
    const payload = promptFile({ extra: [...global(module, name), ...OP.pop, ...OP.none] });
    assert.match(refused(() => Voice.fromBytes(payload, "hostile.pt")), new RegExp(`${module}\\.${name}`));
  }
});

test("a pickle cannot change an allowed global for later files (BUILD on it fails), and a good file still reads", () => {
  const slotState = [...OP.none, ...OP.emptyDict, ...OP.mark, ...str("__defaults__"), ...OP.none, ...OP.setitems,
    ...OP.tuple2, ...OP.build];
  for (const target of [global("torch", "LongStorage"), global("torch._utils", "_rebuild_tensor_v2")]) {
    const pickle = Array.from(promptPickle());
    const at = findBytes(pickle, target);
    pickle.splice(at + target.length, 0, ...slotState);
    assert.match(refused(() => readPrompt(ptFile(Uint8Array.from(pickle), { 0: int64Bytes(codesOf(50)) }), "hostile.pt")),
      /its pickle is malformed \(AttributeError\)/);
  }
  assert.deepEqual(readPrompt(promptFile(), "good.pt").codes, codesOf(50));
});

/** @param {number[]} haystack @param {number[]} needle */
function findBytes(haystack, needle) {
  for (let i = 0; i + needle.length <= haystack.length; i++) if (needle.every((b, k) => haystack[i + k] === b)) return i;
  throw new Error("not found");
}

test("a zip bomb is refused from its declared size, and a lying one from what it inflates to", () => {
  const good = promptFile();
  // a data.pkl that declares 200 MB: refused from the central directory, before a byte is inflated
  const declared = Uint8Array.from(good);
  const view = new DataView(declared.buffer);
  const pkl = zipEntries(good).find((e) => e.name.endsWith("data.pkl"));
  const central = findBytes(Array.from(good), [0x50, 0x4b, 0x01, 0x02]); // data.pkl's entry comes first
  assert.ok(pkl);
  view.setUint32(central + 24, 200 << 20, true);
  assert.match(refused(() => readPrompt(declared, "hostile.pt")), /its member archive\/data\.pkl claims 209715200 bytes, past the 1048576 it may hold/);
  // a deflated data.pkl of 4 MB of zeros declaring 100 bytes: inflation stops at 100 and the CRC fails
  const zeros = new Uint8Array(4 << 20);
  const bomb = zipSync({ "archive/data.pkl": [zeros, { level: 6 }], "archive/data/0": [int64Bytes(codesOf(50)), { level: 0 }] });
  const liar = Uint8Array.from(bomb);
  const lv = new DataView(liar.buffer);
  const entry = zipEntries(bomb)[0];
  const centralAt = findBytes(Array.from(bomb), [0x50, 0x4b, 0x01, 0x02]);
  lv.setUint32(entry.offset + 22, 100, true);
  lv.setUint32(centralAt + 24, 100, true);
  assert.match(refused(() => readPrompt(liar, "hostile.pt")), /data\.pkl cannot be read \(Bad CRC-32 for file 'archive\/data\.pkl'\); the zip is damaged/);
});

test("a deflated member that is what it says is read (numpy.savez_compressed's voices)", () => {
  const voice = new Voice(codesOf(20), 20, TEXT, 0.25);
  const members = zipEntries(voice.toBytes("npz")).map((e) => e.name);
  /** @type {Record<string, [Uint8Array, {level: 6}]>} */
  const files = {};
  for (const name of members) files[name] = [memberOf(voice.toBytes("npz"), name), { level: 6 }];
  const again = Voice.fromBytes(zipSync(files), "compressed.npz");
  assert.deepEqual(again.codes, voice.codes);
  assert.equal(again.text, TEXT);
});

test("truncated zips are refused as damaged", () => {
  const good = promptFile();
  for (const cut of [Math.floor(good.length / 2), good.length - 10, 200]) {
    assert.match(refused(() => Voice.fromBytes(good.subarray(0, cut), "hostile.pt")), /damaged or truncated zip/);
  }
});

test("storages and tensors that lie about their size are refused before they are read", () => {
  const twoGb = promptFile({ ref_audio_tokens: tensor({ numel: 1 << 28, shape: [8, 50] }) });
  assert.match(refused(() => readPrompt(twoGb, "hostile.pt")), /a storage that claims 268435456 elements \(2147483648 bytes\), past the 120000 a voice's codes may have \(10 minutes\)/);
  const past = promptFile({ ref_audio_tokens: tensor({ numel: 400, shape: [8, 100] }) });
  assert.match(refused(() => readPrompt(past, "hostile.pt")), /a tensor of shape \[8, 100\] that reaches past its storage of 400 elements/);
  const short = promptFile({}, 50, int64Bytes(codesOf(40)));
  assert.match(refused(() => readPrompt(short, "hostile.pt")), /its storage 0 holds 2560 bytes for 400 elements of 8/);
  const huge = promptFile({ ref_audio_tokens: tensor({ numel: 400, shape: [8, 50000], stride: [0, 0] }) });
  assert.match(refused(() => readPrompt(huge, "hostile.pt")), new RegExp(`a tensor of shape \\[8, 50000\\], past the ${MAX_ELEMENTS} elements`));
  assert.match(refused(() => readPrompt(promptFile({ ref_audio_tokens: tensor({ key: "../x", numel: 400, shape: [8, 50] }) }), "hostile.pt")),
    /a storage key '\.\.\/x' that is not a number/);
});

test("wrong shapes, dtypes, ranges and types are refused, each in the Python side's words", () => {
  const bytes = (/** @type {number[]} */ values, /** @type {number} */ size = 8) => {
    const out = new Uint8Array(values.length * size);
    const view = new DataView(out.buffer);
    values.forEach((v, i) => (size === 8 ? view.setBigInt64(i * 8, BigInt(v), true) : size === 4 ? view.setFloat32(i * 4, v, true) : view.setUint8(i, v)));
    return out;
  };
  /** @type {[Record<string, number[]>, Uint8Array | null, RegExp][]} */
  const cases = [
    [{ ref_audio_tokens: tensor({ numel: 140, shape: [7, 20] }) }, bytes(new Array(140).fill(0)), /have shape \[7, 20\]; a voice's are \[8, frames\] with 1 to 15000 frames/],
    [{ ref_audio_tokens: tensor({ numel: 160, shape: [1, 8, 20] }) }, bytes(new Array(160).fill(0)), /shape \[1, 8, 20\]/],
    [{ ref_audio_tokens: tensor({ numel: 8, shape: [8] }) }, bytes(new Array(8).fill(0)), /shape \[8\]/],
    [{ ref_audio_tokens: tensor({ numel: 0, shape: [8, 0] }) }, new Uint8Array(0), /shape \[8, 0\]/],
    [{ ref_audio_tokens: tensor({ storage: "FloatStorage", numel: 160, shape: [8, 20] }) }, bytes(new Array(160).fill(0), 4), /are float32; a voice's codes are integers \(int64\)/],
    [{ ref_audio_tokens: tensor({ storage: "BoolStorage", numel: 160, shape: [8, 20] }) }, bytes(new Array(160).fill(0), 1), /are bool/],
    [{ ref_audio_tokens: tensor({ numel: 160, shape: [8, 20] }) }, bytes(new Array(160).fill(1024)), /hold 1024\.\.1024; codes lie in 0\.\.1023/],
    [{ ref_audio_tokens: tensor({ numel: 160, shape: [8, 20] }) }, bytes(new Array(160).fill(-1)), /hold -1\.\.-1/],
    [{ ref_audio_tokens: [...OP.emptyList, ...int(1), ...OP.append] }, null, /its ref_audio_tokens is a list, not a tensor/],
    [{ ref_text: int(42) }, null, /its ref_text is a int, not a transcript/],
    [{ ref_text: str(" \t\u3000") }, null, /its ref_text is empty, not a transcript/],
    [{ ref_rms: str("loud") }, null, /its ref_rms is 'loud'; it is the reference's RMS/],
    [{ ref_rms: float(NaN) }, null, /its ref_rms is nan;/],
    [{ ref_rms: float(-1) }, null, /its ref_rms is -1\.0;/],
    [{ ref_rms: OP.newtrue }, null, /its ref_rms is True;/],
    [{ format_version: int(2) }, null, /its format_version is 2; this reads version 1/],
    [{ format_version: float(1) }, null, /its format_version is 1\.0; this reads version 1/],
    [{ ref_audio_tokens: tensor({ numel: 400, shape: [8, 50], hooks: [...OP.emptyDict, ...str("a"), ...int(1), 0x73] }) }, null,
      /a tensor with hooks or metadata/],
  ];
  for (const [change, storage, expected] of cases) {
    const frames = 50;
    const file = ptFile(promptPickle(change, frames), { 0: storage ?? int64Bytes(codesOf(frames)) });
    assert.match(refused(() => readPrompt(file, "hostile.pt")), expected);
  }
  const list = ptFile(Uint8Array.from([...OP.proto2, ...OP.emptyList, ...int(1), ...OP.append, ...OP.stop]), {});
  assert.match(refused(() => readPrompt(list, "hostile.pt")), /it holds a list, not the dict of a voice prompt/);
  const missing = ptFile(dict([["ref_audio_tokens", tensor({ numel: 24, shape: [8, 3] })], ["ref_rms", float(0.1)]]),
    { 0: int64Bytes(new Array(24).fill(0)) });
  assert.match(refused(() => readPrompt(missing, "hostile.pt")), /it has no ref_text, so it is not a voice prompt/);
});

test("malformed pickles are one line naming the error, never a crash", () => {
  /** @type {[number[], string][]} */
  const cases = [
    [[], "EOFError"], [[...OP.proto2], "EOFError"], [[0x58, 0xff, 0, 0, 0, 0x61], "UnpicklingError"],
    [[...int(1), ...int(2), 0x73, ...OP.stop], "UnpicklingError"], [[...int(1), ...int(2), ...OP.append, ...OP.stop], "AttributeError"],
    [[0xff], "UnpicklingError"], [[0x80, 9, ...OP.stop], "ValueError"], [[0x68, 5, ...OP.stop], "UnpicklingError"],
    [[0x58, 2, 0, 0, 0, 0xc3, 0x28, ...OP.stop], "UnicodeDecodeError"],
    [[...OP.none, ...OP.mark, ...OP.none, ...OP.newtrue, ...OP.build, ...OP.stop], "UnpicklingError"],
  ];
  for (const [pickle, type] of cases) {
    const message = refused(() => readPrompt(ptFile(Uint8Array.from(pickle), {}), "hostile.pt"));
    assert.ok(message.includes(`its pickle is malformed (${type})`), `${pickle}: ${message}`);
  }
  // a pickle that ends with None (BUILD of nothing) is a no-op, then "not the dict"
  const noop = ptFile(Uint8Array.from([...OP.none, ...OP.none, ...OP.build, ...OP.stop]), {});
  assert.match(refused(() => readPrompt(noop, "hostile.pt")), /it holds a NoneType, not the dict/);
});

test("files past the size cap, and files that are no voice at all, are one-line errors", () => {
  const huge = new Uint8Array(MAX_FILE_BYTES + 1);
  huge.set([0x50, 0x4b, 0x03, 0x04]);
  huge.set(Array.from("data.pkl", (c) => c.charCodeAt(0)), 4);
  assert.match(refused(() => Voice.fromBytes(huge, "huge.pt"), "huge.pt"), new RegExp(`it is ${MAX_FILE_BYTES + 1} bytes, past the ${MAX_FILE_BYTES}`));
  assert.match(refused(() => Voice.fromBytes(new TextEncoder().encode("not a voice"), "text.pt"), "text.pt"), /damaged or truncated zip/);
  const noPickle = storedZip([["a.txt", new Uint8Array(3)]]);
  assert.match(refused(() => Voice.fromBytes(noPickle, "other.npz"), "other.npz"), /its zip has no member codes\.npy/);
  const twoPickles = storedZip([["a/data.pkl", new Uint8Array(1)], ["b/data.pkl", new Uint8Array(1)]]);
  assert.match(refused(() => readPrompt(twoPickles, "two.pt"), "two.pt"), /without exactly one data\.pkl/);
  const many = storedZip(Array.from({ length: 65 }, (_, i) => /** @type {[string, Uint8Array]} */ ([`m${i}`, new Uint8Array(0)])));
  assert.match(refused(() => Voice.fromBytes(many, "many.npz"), "many.npz"), /its zip holds 65 members; a voice file has fewer than ten/);
  const order = ptFile(promptPickle(), { 0: int64Bytes(codesOf(50)) }, "middle");
  assert.match(refused(() => readPrompt(order, "order.pt"), "order.pt"), /its byteorder is b'middle', neither little nor big/);
});

test("our .npz is read within bounds: objects, lying headers, wrong shapes and versions are refused", () => {
  const voice = new Voice(codesOf(50), 50, TEXT, 0.1);
  const good = voice.toBytes("npz");
  const object = Uint8Array.from([...npyHeader("|O", [2]), ...new Uint8Array(16)]);
  assert.match(refused(() => Voice.fromBytes(withMember(good, "text.npy", object), "hostile.npz"), "hostile.npz"),
    /its member text\.npy holds Python objects, which a voice never does/);
  const codes = memberOf(good, "codes.npy");
  const lying = Uint8Array.from(codes);
  const text = new TextDecoder("latin1").decode(lying.subarray(0, 128));
  const at = text.indexOf("(8, 50)");
  lying.set(Array.from("(8, 99)", (c) => c.charCodeAt(0)), at);
  assert.match(refused(() => Voice.fromBytes(withMember(good, "codes.npy", lying), "hostile.npz"), "hostile.npz"),
    /its member codes\.npy claims shape \[8, 99\] but holds 3200 bytes/);
  const seven = new Voice(codesOf(50).subarray(0, 350), 50, TEXT, 0.1);
  const sevenRows = Uint8Array.from([...npyHeader("<i8", [7, 50]), ...int64Bytes(seven.codes)]);
  assert.match(refused(() => Voice.fromBytes(withMember(good, "codes.npy", sevenRows), "hostile.npz"), "hostile.npz"),
    /reference codes must have shape \[8, frames >= 1\], got \[7, 50\]/);
  const two = Uint8Array.from([...npyHeader("<i8", []), ...int64Bytes([2])]);
  assert.match(refused(() => Voice.fromBytes(withMember(good, "format_version.npy", two), "hostile.npz"), "hostile.npz"),
    /hostile\.npz is a voice file of another format version/);
  const floatCodes = Uint8Array.from([...npyHeader("<f8", [8, 50]), ...new Uint8Array(3200)]);
  assert.match(refused(() => Voice.fromBytes(withMember(good, "codes.npy", floatCodes), "hostile.npz"), "hostile.npz"),
    /reference codes must be integers in \[0, 1024\); the voice prompt is damaged/);
  const notNpy = withMember(good, "rms.npy", new TextEncoder().encode("hello there"));
  assert.match(refused(() => Voice.fromBytes(notNpy, "hostile.npz"), "hostile.npz"),
    /its member rms\.npy is not a numpy array \(the magic string is not correct; expected b'\\x93NUMPY', got b'hello '\)/);
  assert.match(refused(() => Voice.fromBytes(good.subarray(0, good.length >> 1), "hostile.npz"), "hostile.npz"), /damaged or truncated zip/);
  const bigCodes = new Uint8Array(4096 + MAX_ELEMENTS * 8 + 8);
  assert.match(refused(() => readNpz(withMember(good, "codes.npy", bigCodes), "big.npz"), "big.npz"),
    new RegExp(`its member codes\\.npy claims ${bigCodes.length} bytes, past the ${4096 + MAX_ELEMENTS * 8} it may hold`));
});

test("a .npy round-trips and is written as numpy.save writes it: the header padded to 64 bytes", () => {
  const codes = BigInt64Array.from(codesOf(33), BigInt);
  const bytes = writeNpy(codes, [8, 33]);
  const headerLength = new DataView(bytes.buffer).getUint16(8, true);
  assert.equal((10 + headerLength) % 64, 0);
  assert.equal(bytes[10 + headerLength - 1], 0x0a);
  const back = readNpy(bytes);
  assert.deepEqual(back.shape, [8, 33]);
  assert.equal(back.dtype, "<i8");
  assert.deepEqual(back.data, codes);
  assert.deepEqual(readNpy(writeNpy(Int32Array.from([1, -2, 3]), [3])).data, BigInt64Array.from([1n, -2n, 3n]));
  const floats = Float32Array.from([0.5, -1.25, 3e-8]);
  assert.deepEqual(readNpy(writeNpy(floats, [3])).data, floats);
  // Fortran order: element (i, j) at i + rows * j
  const text = new TextDecoder("latin1").decode(npyHeader("<i8", [2, 3])).replace("'fortran_order': False", "'fortran_order': True ");
  const header = Uint8Array.from(text, (c) => c.charCodeAt(0));
  const f = readNpy(Uint8Array.from([...header, ...int64Bytes([1, 4, 2, 5, 3, 6])]));
  assert.deepEqual(f.data, BigInt64Array.from([1n, 2n, 3n, 4n, 5n, 6n]));
  assert.throws(() => readNpy(new Uint8Array(20), "x.npy"), /codes file x\.npy is not a \.npy file/);
  assert.throws(() => readNpy(Uint8Array.from([...npyHeader("<i8", [8, 3]), ...new Uint8Array(8)]), "x.npy"),
    /claims shape \[8, 3\] but 8 bytes follow/);
  assert.throws(() => writeNpy(codes, [8, 34]), UserError);
});

test("CRC-32 is zlib's", () => {
  assert.equal(crc32(new TextEncoder().encode("123456789")), 0xcbf43926);
  assert.equal(crc32(new Uint8Array(0)), 0);
});

test("Voice.load reads a path and names a missing one as the Python side does", async () => {
  const fs = await import("node:fs");
  const os = await import("node:os");
  const path = await import("node:path");
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "voices-"));
  try {
    const file = path.join(dir, "v.pt");
    fs.writeFileSync(file, new Voice(codesOf(10), 10, TEXT, 0.3).toBytes("pt"));
    const voice = await Voice.load(file);
    assert.equal(voice.frames, 10);
    await assert.rejects(Voice.load(path.join(dir, "missing.pt")),
      { message: `cannot read voice file ${path.join(dir, "missing.pt")} (No such file or directory); save one with --save_voice` });
  } finally {
    fs.rmSync(dir, { recursive: true });
  }
});

test("a voice past ten minutes, or codes of the wrong length, cannot be saved as .pt", () => {
  const frames = MAX_FRAMES + 1;
  assert.throws(() => promptBytes(new Int32Array(8 * frames), frames, TEXT, 0.1), /a voice's codes are \[8, 1\.\.15000\], got \[8, 15001\]/);
  assert.throws(() => new Voice(new Int32Array(7), 1, TEXT, null).toBytes("npz"), UserError);
  assert.ok(PromptFileError.prototype instanceof UserError);
});
