"""The JS runtime's files against the Python side's (web/src/voices, web/src/audio/wav.mjs and npy.mjs, web/bin/omnivoice.mjs).

Python writes voices (ours, upstream's .pt by torch and by prompt_bytes, wyoming-piper's ref.rvq, compressed .npz),
WAV files of every subtype soundfile writes that the Node runtime reads, and hostile voice files; Node reads them
(web/test/tools/read_files.mjs) and must see the same codes, text, rms and samples, and refuse each hostile file
with the very line Python refuses it with. Node writes .npz, .pt, .npy and WAV (web/test/tools/write_files.mjs);
Python, torch and soundfile must read them back equal, and the .pt, .npy and WAV bytes must be the bytes
prompt_bytes, numpy.save and soundfile.write make. Then the Node CLI: bad input is one line and nothing written,
and on the tiny build its WAV, codes and saved voice are inference.py's.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import struct
import subprocess
import zipfile

import numpy as np
import pytest
import soundfile
import torch
from helpers.scripts import ROOT, run_script

from codes.runtime.voices import prompt_file
from codes.runtime.voices.prompt_file import MAX_FILE_BYTES, prompt_bytes
from codes.runtime.voices.voice import Voice

TOOLS = ROOT / "web" / "test" / "tools"
CLI = ROOT / "web" / "bin" / "omnivoice.mjs"
TEXT = "This is what the reference clip says."


def node(script: str, payload) -> subprocess.CompletedProcess:
    result = subprocess.run(["node", str(TOOLS / script)], input=json.dumps(payload), capture_output=True, text=True,
                            timeout=300, cwd=ROOT / "web")
    assert result.returncode == 0, result.stderr
    return result


def js_read(kind: str, paths) -> list[dict]:
    return json.loads(node("read_files.mjs", [{"kind": kind, "path": str(p)} for p in paths]).stdout)


def codes_of(frames: int = 50, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 1024, size=(8, frames), dtype=np.int64)


def python_message(path) -> str:
    with pytest.raises(prompt_file.UserError) as caught:
        Voice.load(path)
    return str(caught.value)


# --- voices Python writes, read in JS ------------------------------------------------------------------------------


def test_voices_python_writes_read_in_js_as_python_reads_them(tmp_path):
    from omnivoice.models.omnivoice import VoiceClonePrompt

    codes = codes_of(77, seed=3)
    files = []
    for rms in (0.0473, None):
        for suffix in (".pt", ".npz"):
            path = tmp_path / f"ours-{rms}{suffix}"
            Voice(codes, "Ünïcödé text, 中文, 😀.", rms).save(path)
            files.append(path)
    (tmp_path / "prompt-bytes.pt").write_bytes(prompt_bytes(codes, TEXT, 0.31))
    VoiceClonePrompt(torch.from_numpy(codes), TEXT, 0.0473).save(str(tmp_path / "upstream.pt"))
    (tmp_path / "npz-named.pt").write_bytes(Voice(codes, TEXT, 0.2).to_bytes("npz"))
    (tmp_path / "pt-named.npz").write_bytes(Voice(codes, TEXT, 0.2).to_bytes("pt"))
    compressed = io.BytesIO()
    np.savez_compressed(compressed, codes=codes, text=np.array(TEXT), rms=np.array(0.125), format_version=np.array(1))
    (tmp_path / "compressed.npz").write_bytes(compressed.getvalue())
    files += [tmp_path / n for n in ("prompt-bytes.pt", "upstream.pt", "npz-named.pt", "pt-named.npz", "compressed.npz")]
    # wyoming-piper's ref.rvq: the three keys alone; tensors that are views, of another int type, transposed
    wider = torch.from_numpy(np.concatenate([codes_of(77, seed=9), codes], axis=1).astype(np.int32))
    for i, tokens in enumerate((torch.from_numpy(codes), wider[:, 77:], torch.from_numpy(codes.T.copy()).t())):
        torch.save({"ref_audio_tokens": tokens, "ref_text": TEXT, "ref_rms": 0.05}, tmp_path / f"ref{i}.rvq")
        files.append(tmp_path / f"ref{i}.rvq")
    for path, got in zip(files, js_read("voice", files)):
        expected = Voice.load(path)
        assert "error" not in got, (path.name, got)
        assert got["frames"] == expected.codes.shape[1], path.name
        assert np.array_equal(np.array(got["codes"]).reshape(8, -1), expected.codes), path.name
        assert got["text"] == expected.text and got["rms"] == expected.rms, path.name


# --- hostile files: refused in Python's words ----------------------------------------------------------------------


class _System:
    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return os.system, (self.command,)


def _with_member(data: bytes, name: str, member: bytes, compress=zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as source, zipfile.ZipFile(out, "w") as target:
        for info in source.infolist():
            mine = info.filename.endswith(name)
            target.writestr(info.filename, member if mine else source.read(info), compress_type=compress if mine else 0)
    return out.getvalue()


def _npz(**arrays) -> bytes:
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def hostile_files(tmp_path) -> dict[str, bytes]:
    """Voice files that must be refused: made with torch, zipfile and numpy as an attacker would make them."""
    files: dict[str, bytes] = {}

    def saved(obj) -> bytes:
        buffer = io.BytesIO()
        torch.save(obj, buffer)
        return buffer.getvalue()

    tokens = torch.from_numpy(codes_of())
    good = {"format_version": 1, "ref_audio_tokens": tokens, "ref_text": TEXT, "ref_rms": 0.1}
    for where in ("ref_audio_tokens", "ref_text", "format_version"):
        files[f"system-{where}.pt"] = saved({**good, where: _System(f"touch {tmp_path / 'pwned'}")})
    for extra, name in ((torch.zeros(2, dtype=torch.bfloat16), "bfloat16"), (torch.nn.Parameter(torch.zeros(2)), "param"),
                        (np.zeros(2), "numpy")):
        files[f"global-{name}.pt"] = saved({**good, "extra": extra})
    changes = {
        "rows7": {"ref_audio_tokens": torch.zeros(7, 20, dtype=torch.int64)},
        "dims3": {"ref_audio_tokens": torch.zeros(1, 8, 20, dtype=torch.int64)},
        "dims1": {"ref_audio_tokens": torch.zeros(8, dtype=torch.int64)},
        "empty": {"ref_audio_tokens": torch.zeros(8, 0, dtype=torch.int64)},
        "float": {"ref_audio_tokens": torch.zeros(8, 20)},
        "half": {"ref_audio_tokens": torch.zeros(8, 20, dtype=torch.float16)},
        "bool": {"ref_audio_tokens": torch.zeros(8, 20, dtype=torch.bool)},
        "mask": {"ref_audio_tokens": torch.full((8, 20), 1024)},
        "negative": {"ref_audio_tokens": torch.full((8, 20), -1)},
        "list": {"ref_audio_tokens": [[1, 2]] * 8},
        "text-int": {"ref_text": 42},
        "text-blank": {"ref_text": "  \u3000"},
        "rms-str": {"ref_rms": "loud"},
        "rms-nan": {"ref_rms": float("nan")},
        "rms-negative": {"ref_rms": -1.0},
        "rms-bool": {"ref_rms": True},
        "rms-long": {"ref_rms": "x" * 100},
        "version-2": {"format_version": 2},
        "version-float": {"format_version": 1.0},
        "version-tuple": {"format_version": (1, "a", None, 2.5)},
    }
    for name, change in changes.items():
        files[f"field-{name}.pt"] = saved({**good, **change})
    files["not-a-dict.pt"] = saved([torch.zeros(8, 3)])
    files["missing.pt"] = saved({"ref_audio_tokens": torch.zeros(8, 3, dtype=torch.int64), "ref_rms": 0.1})
    files["tuple.pt"] = saved((1, 2))

    ours = prompt_bytes(codes_of(), TEXT, 0.1)
    files["bomb.pt"] = _with_member(ours, "data.pkl", b"\0" * (200 << 20), zipfile.ZIP_DEFLATED)
    liar = bytearray(files["bomb.pt"])
    with zipfile.ZipFile(io.BytesIO(files["bomb.pt"])) as archive:
        info = archive.getinfo("archive/data.pkl")
    struct.pack_into("<I", liar, info.header_offset + 22, 100)
    struct.pack_into("<I", liar, files["bomb.pt"].index(b"PK\x01\x02") + 24, 100)
    files["liar.pt"] = bytes(liar)
    for cut in (len(ours) // 2, len(ours) - 10, 200):
        files[f"cut-{cut}.pt"] = ours[:cut]
    with zipfile.ZipFile(io.BytesIO(ours)) as archive:
        pickled = archive.read("archive/data.pkl")
    claim = b"X\x03\x00\x00\x00cpu" + pickle.BININT2 + struct.pack("<H", 400)
    files["storage-2gb.pt"] = _with_member(ours, "data.pkl", pickled.replace(
        claim, claim[:-3] + pickle.BININT + struct.pack("<i", 1 << 28)))
    files["past-storage.pt"] = _with_member(ours, "data.pkl", pickled.replace(
        pickle.BININT1 + b"\x08" + pickle.BININT1 + b"\x32", pickle.BININT1 + b"\x08" + pickle.BININT1 + b"\x64", 1))
    files["short-storage.pt"] = _with_member(ours, "data/0", codes_of(40).tobytes())
    files["key.pt"] = _with_member(ours, "data.pkl", pickled.replace(b"X\x01\x00\x00\x000", b"X\x04\x00\x00\x00../0", 1))
    files["byteorder.pt"] = _with_member(ours, "byteorder", b"middle")
    slot_state = (pickle.NONE + pickle.EMPTY_DICT + pickle.MARK + pickle.BINUNICODE + struct.pack("<I", 12)
                  + b"__defaults__" + pickle.NONE + pickle.SETITEMS + pickle.TUPLE2 + pickle.BUILD)
    for name, target in (("storage", pickle.GLOBAL + b"torch\nLongStorage\n"),
                         ("rebuild", pickle.GLOBAL + b"torch._utils\n_rebuild_tensor_v2\n")):
        files[f"build-{name}.pt"] = _with_member(ours, "data.pkl", pickled.replace(target, target + slot_state, 1))
    for name, body in (("empty", b""), ("proto", b"\x80\x02"), ("truncated", pickled[:40]), ("underflow", b"K\x01K\x02s."),
                       ("append", b"K\x01K\x02a."), ("opcode", b"\xff"), ("protocol", b"\x80\x09."),
                       ("memo", b"h\x05."), ("utf8", b"X\x02\x00\x00\x00\xc3(."), ("state", b"N(N\x88b."),
                       ("list-setitem", b"\x80\x02]K\x01K\x02s.")):
        files[f"pickle-{name}.pt"] = _with_member(ours, "data.pkl", body)
    files["huge.pt"] = b"PK\x03\x04" + b"data.pkl" + b"\0" * MAX_FILE_BYTES
    files["text.pt"] = b"not a voice"
    legacy = io.BytesIO()
    torch.save({"ref_audio_tokens": torch.zeros(8, 3, dtype=torch.int64)}, legacy, _use_new_zipfile_serialization=False)
    files["legacy.pt"] = legacy.getvalue()

    npz_good = dict(codes=codes_of(), text=np.array(TEXT), rms=np.array(0.1), format_version=np.array(1))
    raw = _npz(**npz_good)
    files["object.npz"] = _npz(**{**npz_good, "text": np.array([TEXT, 1], dtype=object)})
    bomb = io.BytesIO()
    np.savez_compressed(bomb, **{**npz_good, "codes": np.zeros((8, 3_276_800), np.int64)})
    files["bomb.npz"] = bomb.getvalue()
    with zipfile.ZipFile(io.BytesIO(raw)) as archive:
        header_claim = archive.read("codes.npy").replace(b"(8, 50)", b"(8, 99)")
    files["header-lie.npz"] = _with_member(raw, "codes.npy", header_claim)
    files["rows7.npz"] = _npz(**{**npz_good, "codes": codes_of()[:7]})
    files["float-codes.npz"] = _npz(**{**npz_good, "codes": codes_of().astype(np.float64)})
    files["range.npz"] = _npz(**{**npz_good, "codes": np.full((8, 5), 1024)})
    files["version-2.npz"] = _npz(**{**npz_good, "format_version": np.array(2)})
    files["text-int.npz"] = _npz(**{**npz_good, "text": np.array(5)})
    files["rms-vector.npz"] = _npz(**{**npz_good, "rms": np.array([0.1, 0.2])})
    files["missing.npz"] = _npz(codes=codes_of(), text=np.array(TEXT), rms=np.array(0.1))
    files["not-npy.npz"] = _with_member(raw, "rms.npy", b"hello there")
    files["cut.npz"] = raw[: len(raw) // 2]
    return files


def test_hostile_voice_files_are_refused_in_js_with_pythons_line_and_nothing_runs(tmp_path):
    files = hostile_files(tmp_path)
    paths = []
    for name, data in files.items():
        (tmp_path / name).write_bytes(data)
        paths.append(tmp_path / name)
    answers = js_read("voice", paths)
    differing = []
    for path, got in zip(paths, answers):
        expected = python_message(path)
        assert "error" in got, f"{path.name} was read: {got}"
        assert "\n" not in got["error"] and path.name in got["error"]
        if got["error"] != expected:
            differing.append(f"{path.name}:\n  python: {expected}\n  js:     {got['error']}")
    assert not differing, "\n".join(differing)
    assert not (tmp_path / "pwned").exists()


# --- WAV files soundfile writes, read in JS ------------------------------------------------------------------------


WAV_SUBTYPES = ("PCM_U8", "PCM_16", "PCM_24", "PCM_32", "FLOAT", "DOUBLE")


def test_wav_files_of_every_subtype_read_in_js_as_soundfile_reads_them(tmp_path):
    rng = np.random.default_rng(7)
    # full scale and past it (float files keep it), quiet values, and exact extremes
    base = np.concatenate([rng.uniform(-1.2, 1.2, 600), rng.normal(0, 1e-3, 200), [1.0, -1.0, 0.0, 0.5, -0.5]])
    files = []
    for subtype in WAV_SUBTYPES:
        for channels, rate, container in ((1, 24000, "WAV"), (2, 44100, "WAV"), (3, 16000, "WAVEX")):
            clip = np.stack([base * (1 - 0.2 * c) for c in range(channels)], axis=1).astype(np.float32)
            path = tmp_path / f"{subtype}-{channels}-{container}.wav"
            soundfile.write(path, clip, rate, subtype=subtype, format=container)
            files.append(path)
    for path, got in zip(files, js_read("wav", files)):
        expected, rate = soundfile.read(path, dtype="float32", always_2d=True)
        assert "error" not in got, (path.name, got)
        assert got["sampleRate"] == rate
        ours = np.array(got["channels"], dtype=np.float64)
        assert ours.shape == expected.T.shape, path.name
        assert np.array_equal(ours.astype(np.float32), expected.T) and np.array_equal(ours, expected.T.astype(np.float64)), path.name


def test_audio_the_node_runtime_does_not_read_is_refused_in_one_line(tmp_path):
    clip = np.zeros((2400, 1), np.float32)
    files = []
    for subtype, container in (("ULAW", "WAV"), ("IMA_ADPCM", "WAV"), ("PCM_16", "FLAC"), ("VORBIS", "OGG"), ("PCM_16", "AIFF")):
        path = tmp_path / f"clip-{subtype}.{container.lower()}"
        soundfile.write(path, clip, 24000, subtype=subtype, format=container)
        files.append(path)
    for path, got in zip(files, js_read("wav", files)):
        assert "error" in got and "\n" not in got["error"] and str(path) in got["error"], (path.name, got)
        assert "Node reads WAV: PCM 8, 16, 24 or 32-bit, or float 32 or 64-bit" in got["error"]


# --- files JS writes, read in Python -------------------------------------------------------------------------------


def quantization_samples() -> np.ndarray:
    rng = np.random.default_rng(11)
    edges = [0.0, -0.0, 1.0, -1.0, 1.5, -1.5, 2.0, 1e10, -1e10, np.nan, np.inf, -np.inf, 1.00002, -1.00004,
             0.5, -0.5, 1 / 32768, -1 / 32768, 0.5 / 32767, 1.5 / 32767, 2.5 / 32767, -0.5 / 32767, 1e-9, -1e-9, 1e-45]
    steps = np.arange(-70000, 70000) / 65536  # every half step around the 16-bit grid, past both ends
    return np.concatenate([edges, rng.uniform(-1, 1, 20000), rng.normal(0, 1e-4, 2000), steps]).astype(np.float32)


def test_files_js_writes_read_back_in_python_and_are_the_bytes_python_writes(tmp_path):
    codes = codes_of(61, seed=5)
    voices = [{"codes": codes.ravel().tolist(), "frames": 61, "text": text, "rms": rms,
               "npz": str(tmp_path / f"v{i}.npz"), "pt": str(tmp_path / f"v{i}.pt")}
              for i, (text, rms) in enumerate(((TEXT, 0.0473), ("Ünïcödé, 中文, 😀 and a lone \ud800 surrogate.", None),
                                               ("x", 0.0)))]
    big = np.array([2**62, -(2**63), 0, 1023], dtype=np.int64)
    npys = [{"values": [str(v) for v in codes.ravel()], "shape": [8, 61], "dtype": "int64", "path": str(tmp_path / "codes.npy")},
            {"values": [str(v) for v in big], "shape": [4], "dtype": "int64", "path": str(tmp_path / "big.npy")},
            {"values": [1, -2, 3, 4, 5, 6], "shape": [2, 3], "dtype": "int32", "path": str(tmp_path / "int32.npy")},
            {"values": [0.5, -1.25, 3e-8], "shape": [3], "dtype": "float32", "path": str(tmp_path / "float.npy")},
            {"values": [], "shape": [8, 0], "dtype": "int64", "path": str(tmp_path / "empty.npy")}]
    samples = quantization_samples()
    (tmp_path / "samples.f32").write_bytes(samples.astype("<f4").tobytes())
    wavs = [{"samples": str(tmp_path / "samples.f32"), "sampleRate": rate, "path": str(tmp_path / f"out-{rate}.wav")}
            for rate in (24000, 44100)]
    node("write_files.mjs", {"voices": voices, "npy": npys, "wav": wavs})

    for v in voices:
        rms = v["rms"]
        for kind in ("npz", "pt"):
            loaded = Voice.load(v[kind])
            assert np.array_equal(loaded.codes, codes) and loaded.text == v["text"] and loaded.rms == rms, v[kind]
        with open(v["pt"], "rb") as f:
            assert f.read() == prompt_bytes(codes, v["text"], rms)  # byte for byte
        tensors = torch.load(v["pt"], weights_only=True)
        assert torch.equal(tensors["ref_audio_tokens"], torch.from_numpy(codes)) and tensors["ref_text"] == v["text"]
        assert tensors["ref_rms"] == rms and tensors["format_version"] == 1
        assert np.array_equal(torch.load(v["pt"], weights_only=True, mmap=True)["ref_audio_tokens"].numpy(), codes)
        with np.load(v["npz"]) as arrays:
            assert arrays["codes"].dtype == np.int64 and arrays["text"].dtype.kind == "U"
    from omnivoice.models.omnivoice import VoiceClonePrompt

    upstream = VoiceClonePrompt.load(voices[0]["pt"])
    assert np.array_equal(upstream.ref_audio_tokens.numpy(), codes) and upstream.ref_rms == 0.0473

    for spec, expected in zip(npys, (codes, big, np.array([[1, -2, 3], [4, 5, 6]], np.int64),
                                     np.array([0.5, -1.25, 3e-8], np.float32), np.zeros((8, 0), np.int64))):
        buffer = io.BytesIO()
        np.save(buffer, expected, allow_pickle=False)
        with open(spec["path"], "rb") as f:
            assert f.read() == buffer.getvalue(), spec["path"]  # numpy.save's bytes: header, padding, data
    back = js_read("npy", [tmp_path / "codes.npy", tmp_path / "big.npy"])
    assert np.array_equal(np.array(back[0]["data"], np.int64).reshape(back[0]["shape"]), codes)
    assert [int(x) for x in back[1]["data"]] == big.tolist() and back[1]["dtype"] == "<i8"

    for spec in wavs:
        buffer = io.BytesIO()
        soundfile.write(buffer, samples, spec["sampleRate"], subtype="PCM_16", format="WAV")  # outputs.py write_audio
        with open(spec["path"], "rb") as f:
            ours = f.read()
        theirs = buffer.getvalue()
        if ours != theirs:
            a = np.frombuffer(ours[44:], "<i2")
            b = np.frombuffer(theirs[44:], "<i2")
            bad = np.flatnonzero(a != b)[:5] if len(a) == len(b) else []
            raise AssertionError(f"header equal: {ours[:44] == theirs[:44]}; first differing samples: "
                                 f"{[(float(samples[i]), int(a[i]), int(b[i])) for i in bad]}")


# --- the CLI -------------------------------------------------------------------------------------------------------


def cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run(["node", str(CLI), *map(str, args)], capture_output=True, text=True, timeout=600, cwd=cwd or ROOT)


def one_line_error(result: subprocess.CompletedProcess, code: int = 2) -> str:
    assert result.returncode == code, (result.returncode, result.stderr)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "    at " not in result.stderr  # no stack
    return lines[0]


def test_cli_bad_input_is_one_line_exit_2_before_any_model_and_nothing_is_written(tmp_path):
    (tmp_path / "voice.pt").write_bytes(prompt_bytes(codes_of(), TEXT, 0.1))
    (tmp_path / "taken.npz").write_bytes(b"mine")
    (tmp_path / "existing.wav").write_bytes(b"not touched")
    (tmp_path / "clip.mp3").write_bytes(b"ID3\x04\x00\x00 an mp3")
    evil = io.BytesIO()
    torch.save({"ref_audio_tokens": torch.zeros(8, 3, dtype=torch.int64), "ref_text": TEXT, "ref_rms": 0.1,
                "x": _System(f"touch {tmp_path / 'pwned'}")}, evil)
    (tmp_path / "evil.pt").write_bytes(evil.getvalue())
    no_build = tmp_path / "not-a-build"
    no_build.mkdir()
    junk = tmp_path / "junk-build"
    junk.mkdir()
    (junk / "omnivoice_manifest.json").write_text("{ not json")
    out = tmp_path / "existing.wav"
    cases = [
        ((), "the argument --text is required"),
        (("--text", "Hi.", "--speed", "fast"), "argument --speed: invalid float value: 'fast'"),
        (("--text", "Hi.", "--num_steps", "2.5"), "argument --num_steps: invalid int value: '2.5'"),
        (("--text", "Hi.", "--denoise", "maybe"), "argument --denoise: expected true or false, got 'maybe'"),
        (("--text", "Hi.", "--no_such_flag", "1"), "unrecognized arguments: --no_such_flag"),
        (("--text", "Hi.", "--num_steps", "0"), "num_steps must be a whole number >= 1, got 0"),
        (("--text", "Hi.", "--t_shift", "-1"), "t_shift must be > 0, got -1.0"),
        (("--text", "Hi.", "--denoise", "true", "--no_denoise"), "--denoise true and --no_denoise contradict each other"),
        (("--text", "Hi.", "--normalize_text"), "--normalize_text is inference.py's alone"),
        (("--text", "Hi.", "--ref_text", "words"), "--ref_text needs --ref_audio, the clip it transcribes"),
        (("--text", "Hi.", "--ref_audio", tmp_path / "clip.mp3", "--voice", tmp_path / "voice.pt"), "give either --ref_audio"),
        (("--text", "Hi.", "--ref_audio", tmp_path / "clip.mp3"), "--ref_audio needs its transcript, --ref_text"),
        (("--text", "Hi.", "--ref_audio", tmp_path / "clip.mp3", "--ref_text", "x", "--model_dir", no_build),
         f"cannot read audio file {tmp_path / 'clip.mp3'}: it is not a WAV file"),
        (("--text", "Hi.", "--ref_audio", tmp_path / "none.wav", "--ref_text", "x"), "audio file not found"),
        (("--text", "Hi.", "--output", tmp_path / "no" / "x.wav"), "folder"),
        (("--text", "Hi.", "--output", tmp_path), "is a folder; give a file name"),
        (("--text", "Hi.", "--output", tmp_path / "x.flac"), "needs the extension .wav"),
        (("--text", "Hi.", "--voice", tmp_path / "voice.pt", "--save_voice", tmp_path / "taken.npz"),
         f"--save_voice {tmp_path / 'taken.npz'} exists"),
        (("--text", "Hi.", "--save_voice", tmp_path / "new.npz"), "--save_voice saves the voice of --ref_audio or of --voice"),
        (("--text", "Hi.", "--voice", tmp_path / "missing.pt"), "(No such file or directory); save one with --save_voice"),
        (("--text", "Hi.", "--voice", tmp_path / "evil.pt"), "asks for the global posix.system"),
        (("--text", "Hi.", "--model_dir", no_build), "not-a-build"),
        (("--text", "Hi.", "--model_dir", junk), "junk-build"),
        (("--text", "Hi.", "--model_dir", tmp_path / "nowhere"), "nowhere"),
    ]
    for args, expected in cases:
        line = one_line_error(cli(*args, "--output", out, "--codes_out", tmp_path / "c.npy", cwd=tmp_path)
                              if "--output" not in map(str, args) else cli(*args, cwd=tmp_path))
        assert expected in line, (args, line)
    # nothing written, nothing replaced, nothing left behind
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["voice.pt", "taken.npz", "existing.wav", "clip.mp3", "evil.pt", "not-a-build", "junk-build"])
    assert (tmp_path / "existing.wav").read_bytes() == b"not touched" and (tmp_path / "taken.npz").read_bytes() == b"mine"
    assert not list(no_build.iterdir())
    # the same bad voice in inference.py: the same line
    python = run_script("inference.py", "--model_dir", no_build, "--text", "Hi.", "--voice", tmp_path / "evil.pt",
                        "--output", tmp_path / "py.wav")
    node_line = one_line_error(cli("--model_dir", no_build, "--text", "Hi.", "--voice", tmp_path / "evil.pt",
                                   "--output", tmp_path / "js.wav"))
    assert python.returncode == 2 and python.stderr.strip().splitlines()[-1] == node_line


def test_cli_on_the_tiny_build_writes_inference_pys_wav_codes_and_voice(builds, tmp_path):
    from helpers.synthesis_inputs import FP32_BUILD, REF_TEXT, reference_clip, write_clip

    from codes.runtime.contract.native_kernels import KEEP, SWITCH

    build = builds.get(*FP32_BUILD)
    common = ("--model_dir", build, "--text", "Hello there, how are you today?", "--num_steps", "6", "--seed", "5")
    (tmp_path / "js.wav").write_bytes(b"replaced, as inference.py replaces it")
    node_run = cli(*common, "--output", tmp_path / "js.wav", "--codes_out", tmp_path / "js.npy", "--quiet")
    assert node_run.returncode == 0, node_run.stderr
    # Node runs ONNX Runtime's kernels; Python's decoder would run our Snake, whose sine moves a sample by 1e-7
    run_script("inference.py", *common, "--output", tmp_path / "py.wav", "--codes_out", tmp_path / "py.npy", "--quiet",
               env={SWITCH: KEEP}, check=True)
    assert np.array_equal(np.load(tmp_path / "js.npy"), np.load(tmp_path / "py.npy"))
    assert np.load(tmp_path / "js.npy").dtype == np.int64
    assert (tmp_path / "js.wav").read_bytes() == (tmp_path / "py.wav").read_bytes()

    # a clone: the voice saved as upstream's .pt, read by torch; speaking with it again gives the same codes
    clip = write_clip(tmp_path / "ref.wav", reference_clip(24000, seed=0, peak=0.08), 24000, subtype="PCM_16")
    cloned = cli("--model_dir", build, "--text", "A clone speaks this.", "--ref_audio", clip, "--ref_text", REF_TEXT,
                 "--num_steps", "4", "--seed", "2", "--save_voice", tmp_path / "me.pt", "--output", tmp_path / "a.wav",
                 "--codes_out", tmp_path / "a.npy", "--quiet")
    assert cloned.returncode == 0, cloned.stderr
    saved = torch.load(tmp_path / "me.pt", weights_only=True)
    python_voice = Voice.load(tmp_path / "me.pt")
    assert np.array_equal(saved["ref_audio_tokens"].numpy(), python_voice.codes) and saved["ref_text"] == python_voice.text
    again = cli("--model_dir", build, "--text", "A clone speaks this.", "--voice", tmp_path / "me.pt", "--num_steps", "4",
                "--seed", "2", "--output", tmp_path / "b.wav", "--codes_out", tmp_path / "b.npy", "--quiet")
    assert again.returncode == 0, again.stderr
    assert np.array_equal(np.load(tmp_path / "a.npy"), np.load(tmp_path / "b.npy"))
    run_script("inference.py", "--model_dir", build, "--text", "A clone speaks this.", "--voice", tmp_path / "me.pt",
               "--num_steps", "4", "--seed", "2", "--output", tmp_path / "c.wav", "--codes_out", tmp_path / "c.npy",
               "--quiet", env={SWITCH: KEEP}, check=True)
    assert np.array_equal(np.load(tmp_path / "b.npy"), np.load(tmp_path / "c.npy"))
    assert (tmp_path / "b.wav").read_bytes() == (tmp_path / "c.wav").read_bytes()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # no temporaries left
