"""inference.py as a user runs it: WAVs, codes and voices out, batches, split builds, and every bad input.

Each bad input is one `error: ...` line with exit code 2 and no output file. The CLI's
codes are compared with the API's (same seed), which test_synthesis.py compares with upstream.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile
from helpers.scripts import ROOT, last_error_line, run_script
from helpers.synthesis_inputs import ASR_BUILD, ASR_ONLY, FP32_BUILD, REF_TEXT, reference_clip, write_clip

from codes.export.generated_higgs import speech_like_signal
from codes.export.manifest_write import write_manifest
from codes.runtime.contract.manifest import MANIFEST_NAME, read_manifest
from codes.runtime.synthesis import OmniVoiceOnnx

FAST = ("--num_steps", "8", "--threads", "1", "--quiet")
TEXT = "Hello there, how are you today?"


def speak(model_dir, *args) -> subprocess.CompletedProcess:
    return run_script("inference.py", "--model_dir", model_dir, *FAST, *args)


def assert_ok(result):
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture(scope="module")
def model_dir(builds):
    return builds.get(*FP32_BUILD)


@pytest.fixture(scope="module")
def tts(model_dir):
    return OmniVoiceOnnx(model_dir, threads=1)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return write_clip(tmp_path_factory.mktemp("reference") / "ref.wav", reference_clip(24000), 24000)


def api_codes(tts, text, seed, **options):
    return tts.generate(text, seed=seed, num_steps=8, return_codes=True, **options)[1]


# ---------------------------------------------------------------------------
# Happy paths
# ---------------------------------------------------------------------------


def test_text_gives_a_24k_wav_the_api_codes_and_an_rtf_line(model_dir, tts, tmp_path):
    result = speak(model_dir, "--text", TEXT, "--output", tmp_path / "out.wav", "--codes_out", tmp_path / "codes.npy",
                   "--seed", "3")
    assert_ok(result)
    assert re.search(r"^RTF \d+\.\d+ \(", result.stdout, re.M)
    wav, rate = soundfile.read(tmp_path / "out.wav", dtype="float32")
    codes = np.load(tmp_path / "codes.npy")
    assert rate == 24000 and wav.ndim == 1
    assert codes.dtype == np.int64 and codes.shape[0] == 8
    audio, expected = tts.generate(TEXT, seed=3, num_steps=8, return_codes=True)
    np.testing.assert_array_equal(codes, expected)
    np.testing.assert_allclose(wav, audio, atol=1.01 / 32768)  # 16-bit PCM of the same audio
    assert sorted(p.name for p in tmp_path.iterdir()) == ["codes.npy", "out.wav"]


def test_text_file_writes_one_wav_per_line_in_batches(model_dir, tts, tmp_path):
    lines = ["First line to speak.", "", "你好，世界。", "The third and last line."]
    (tmp_path / "lines.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = speak(model_dir, "--text_file", tmp_path / "lines.txt", "--output", tmp_path / "wavs",
                   "--codes_out", tmp_path / "codes", "--batch_size", "2", "--seed", "4")
    assert_ok(result)
    names = ["0001", "0002", "0003"]
    assert sorted(p.name for p in (tmp_path / "wavs").iterdir()) == [f"{n}.wav" for n in names]
    for name in names:
        assert soundfile.info(tmp_path / "wavs" / f"{name}.wav").samplerate == 24000
    codes = [np.load(tmp_path / "codes" / f"{n}.npy") for n in names]
    # Line i draws from seed + i whatever its batch: the API on all lines at once gives the same codes,
    # and so does each line alone with its own seed.
    expected = api_codes(tts, [lines[0], lines[2], lines[3]], seed=4)
    for mine, theirs in zip(codes, expected):
        np.testing.assert_array_equal(mine, theirs)
    np.testing.assert_array_equal(codes[2], api_codes(tts, lines[3], seed=6))


def test_jsonl_lines_carry_their_own_names_and_options(model_dir, tmp_path):
    records = [
        {"text": "Hello.", "output": "greeting.wav", "language": "en", "duration": 1.2},
        {"text": "Second line, designed voice.", "instruct": "female, low pitch", "speed": 1.3},
    ]
    (tmp_path / "lines.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    result = speak(model_dir, "--jsonl", tmp_path / "lines.jsonl", "--output", tmp_path / "wavs",
                   "--codes_out", tmp_path / "codes")
    assert_ok(result)
    assert sorted(p.name for p in (tmp_path / "wavs").iterdir()) == ["0002.wav", "greeting.wav"]
    assert np.load(tmp_path / "codes" / "greeting.npy").shape == (8, 30)  # 1.2 s at 25 frames per second


def test_an_upstream_test_list_speaks_through_jsonl_each_line_with_its_own_clip(model_dir, reference, tmp_path):
    (tmp_path / "clips").mkdir()
    (tmp_path / "clips" / "ref.wav").write_bytes(Path(reference).read_bytes())
    records = [
        {"id": "cloned", "text": TEXT, "ref_audio": "clips/ref.wav", "ref_text": REF_TEXT, "language_id": "en",
         "language_name": "English"},
        {"id": "plain", "text": "No clip for this one.", "language_id": "de"},
    ]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    listed = speak(model_dir, "--jsonl", tmp_path / "test.jsonl", "--output", tmp_path / "res", "--seed", "5",
                   "--codes_out", tmp_path / "codes")
    assert_ok(listed)
    assert sorted(p.name for p in (tmp_path / "res").iterdir()) == ["cloned.wav", "plain.wav"]
    alone = speak(model_dir, "--text", TEXT, "--ref_audio", reference, "--ref_text", REF_TEXT, "--language", "en",
                  "--seed", "5", "--output", tmp_path / "alone.wav", "--codes_out", tmp_path / "alone.npy")
    assert_ok(alone)
    np.testing.assert_array_equal(np.load(tmp_path / "codes" / "cloned.npy"), np.load(tmp_path / "alone.npy"))

    (tmp_path / "escape.jsonl").write_text('{"id": "../outside", "text": "x"}\n', encoding="utf-8")
    refused = speak(model_dir, "--jsonl", tmp_path / "escape.jsonl", "--output", tmp_path / "res2")
    assert refused.returncode == 2 and "is not a plain file name" in refused.stderr
    assert not (tmp_path / "res2").exists() and not (tmp_path / "outside.wav").exists()


def test_saved_voice_gives_the_same_codes_as_cloning(model_dir, tts, reference, tmp_path):
    cloned = speak(model_dir, "--text", TEXT, "--ref_audio", reference, "--ref_text", REF_TEXT, "--seed", "5",
                   "--save_voice", tmp_path / "voice.npz", "--output", tmp_path / "cloned.wav",
                   "--codes_out", tmp_path / "cloned.npy")
    assert_ok(cloned)
    reused = speak(model_dir, "--text", TEXT, "--voice", tmp_path / "voice.npz", "--seed", "5",
                   "--output", tmp_path / "reused.wav", "--codes_out", tmp_path / "reused.npy")
    assert_ok(reused)
    codes = np.load(tmp_path / "cloned.npy")
    np.testing.assert_array_equal(np.load(tmp_path / "reused.npy"), codes)
    np.testing.assert_array_equal(*(soundfile.read(tmp_path / f"{name}.wav")[0] for name in ("reused", "cloned")))
    np.testing.assert_array_equal(codes, api_codes(tts, TEXT, seed=5, ref_audio=reference, ref_text=REF_TEXT))


def test_a_clip_alone_with_another_builds_recogniser_and_in_a_jsonl_line(model_dir, builds, reference, tmp_path):
    """--asr_dir lends a build without a recogniser another build's; a test-list line without ref_text is
    transcribed the same way. Both clone what the build holding the recogniser clones."""
    asr_build = builds.get(*ASR_BUILD)
    _, expected = OmniVoiceOnnx(asr_build, threads=1).generate(TEXT, language="en", ref_audio=reference, seed=5,
                                                               num_steps=8, return_codes=True)
    alone = speak(model_dir, "--asr_dir", builds.get(*ASR_ONLY), "--text", TEXT, "--language", "en", "--ref_audio",
                  reference, "--seed", "5", "--output", tmp_path / "alone.wav", "--codes_out", tmp_path / "alone.npy")
    assert_ok(alone)
    np.testing.assert_array_equal(np.load(tmp_path / "alone.npy"), expected)

    (tmp_path / "clips").mkdir()
    shutil.copy(reference, tmp_path / "clips" / "ref.wav")
    line = {"id": "cloned", "text": TEXT, "ref_audio": "clips/ref.wav", "language_id": "en"}
    (tmp_path / "test.jsonl").write_text(json.dumps(line) + "\n", encoding="utf-8")
    listed = speak(asr_build, "--jsonl", tmp_path / "test.jsonl", "--output", tmp_path / "res", "--seed", "5",
                   "--codes_out", tmp_path / "codes")
    assert_ok(listed)
    np.testing.assert_array_equal(np.load(tmp_path / "codes" / "cloned.npy"), expected)


def test_backbone_only_build_with_a_separate_codec_build(builds, tts, tmp_path):
    backbone, codec = builds.get("cpu_fp32"), builds.get("cpu_fp32", "--higgs-only")
    result = speak(backbone, "--higgs_dir", codec, "--text", TEXT, "--seed", "6", "--output", tmp_path / "out.wav",
                   "--codes_out", tmp_path / "codes.npy")
    assert_ok(result)
    assert soundfile.info(tmp_path / "out.wav").samplerate == 24000
    # Same fp32 backbone as the full build; the codec only turns codes into audio.
    np.testing.assert_array_equal(np.load(tmp_path / "codes.npy"), api_codes(tts, TEXT, seed=6))


def test_unknown_language_warns_and_falls_back_to_none(model_dir, tts, tmp_path):
    result = speak(model_dir, "--text", TEXT, "--language", "Klingon", "--seed", "7",
                   "--output", tmp_path / "out.wav", "--codes_out", tmp_path / "codes.npy")
    assert_ok(result)
    assert "'Klingon' is not recognized" in result.stderr and "language-agnostic" in result.stderr
    np.testing.assert_array_equal(np.load(tmp_path / "codes.npy"), api_codes(tts, TEXT, seed=7, language=None))


def test_runtime_path_never_imports_torch(model_dir, tmp_path):
    script = (
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT)!r})\n"
        "import codes.runtime.synthesis, codes.runtime.audio.codec, inference\n"
        f"code = inference.main(['--model_dir', {str(model_dir)!r}, '--text', 'Hello.', '--num_steps', '4',\n"
        f"                       '--quiet', '--output', {str(tmp_path / 'out.wav')!r}])\n"
        "print(code, sorted(m for m in ('torch', 'torchaudio', 'transformers', 'omnivoice') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "0 []"
    assert (tmp_path / "out.wav").is_file()


# ---------------------------------------------------------------------------
# Bad input: one line, exit code 2, nothing written
# ---------------------------------------------------------------------------


def _rehash(folder: Path, **changes) -> Path:
    """Rewrite a build's manifest with `changes` and fresh hashes, so only the change is wrong."""
    data = read_manifest(folder, verify=False).data
    write_manifest(folder, {k: v for k, v in {**data, **changes}.items()
                            if k not in ("format", "format_version", "toolkit_version", "files")}, list(data["files"]))
    return folder


@pytest.fixture(scope="module")
def broken_builds(model_dir, builds, tiny_checkpoint, tmp_path_factory):
    """Model folders that must be refused: no manifest, a changed file, causal backbones, a codec-only build."""
    root = tmp_path_factory.mktemp("broken")
    copies = {name: shutil.copytree(model_dir, root / name)
              for name in ("no-manifest", "changed-file", "causal-manifest", "causal-graph")}
    (copies["no-manifest"] / MANIFEST_NAME).unlink()
    with open(copies["changed-file"] / "audio_heads_decoder.onnx", "r+b") as f:
        f.seek(-8, 2)
        f.write(b"\x00" * 8)
    _rehash(copies["causal-manifest"], attention="causal")
    # The backbone as onnxruntime-genai writes it (2-D mask, causal) in place of ours, hashes made to match.
    from codes.export.checkpoint import load_omnivoice
    from codes.export.llm_genai import build_genai_causal, write_standalone_llm

    hf_dir = write_standalone_llm(load_omnivoice(tiny_checkpoint.path), root / "hf")
    genai_graph = build_genai_causal(hf_dir, root / "genai", "fp32", "cpu")
    shutil.copy(genai_graph, copies["causal-graph"] / "llm_decoder.onnx")
    shutil.copy(genai_graph.with_name("model.onnx.data"), copies["causal-graph"] / "model.onnx.data")
    _rehash(copies["causal-graph"])
    return {**copies, "codec-only": builds.get("cpu_fp32", "--higgs-only"), "backbone-only": builds.get("cpu_fp32")}


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """Input files for the bad cases: JSONL lines and reference clips that must be refused."""
    folder = tmp_path_factory.mktemp("bad_inputs")
    lines = {
        "not-json": '{"text": "Hi", \n',
        "no-text": '{"output": "a.wav"}\n',
        "unknown-key": '{"text": "Hi", "volume": 3}\n',
        "wrong-type": '{"text": "Hi", "speed": "fast"}\n',
        "bad-instruct": '{"text": "Hi", "instruct": "male, female"}\n',
        "good": '{"text": "A good second line."}\n',
    }
    for name, line in lines.items():
        (folder / f"{name}.jsonl").write_text('{"text": "A good line first."}\n' + line, encoding="utf-8")
    (folder / "not-audio.wav").write_text("this is not audio\n")
    write_clip(folder / "silent.wav", np.zeros((48000, 1), np.float32), 24000)
    write_clip(folder / "empty.wav", np.zeros((0, 1), np.float32), 24000)
    write_clip(folder / "long.wav", speech_like_signal(31, 24000, seed=3)[:, None], 24000)
    (folder / "clip-alone.jsonl").write_text('{"text": "Hi.", "ref_audio": "long.wav"}\n', encoding="utf-8")
    (folder / "a-file").write_text("a file, not a folder\n")
    return folder


# case -> (arguments, words the error line must hold). --model_dir defaults to the fp32 build and
# --output to a fresh file (or folder, for --jsonl); {broken:NAME} is a refused model folder, {in} the inputs.
BAD_INPUT = {
    "empty text": (["--text", ""], "text is empty"),
    "whitespace text": (["--text", " \t "], "text is empty"),
    "unknown instruct item": (["--text", "Hi.", "--instruct", "female, lowpitch"], "did you mean 'low pitch'"),
    "conflicting instruct items": (["--text", "Hi.", "--instruct", "male, female"], "conflicting instruct items"),
    "zero duration": (["--text", "Hi.", "--duration", "0"], "duration must be > 0"),
    "negative duration": (["--text", "Hi.", "--duration", "-1.5"], "duration must be > 0"),
    "zero speed": (["--text", "Hi.", "--speed", "0"], "speed must be > 0"),
    "negative speed": (["--text", "Hi.", "--speed", "-2"], "speed must be > 0"),
    "zero steps": (["--text", "Hi.", "--num_steps", "0"], "num_steps must be a whole number >= 1"),
    "no manifest": (["--model_dir", "{broken:no-manifest}", "--text", "Hi."], f"has no {MANIFEST_NAME}"),
    "changed file": (["--model_dir", "{broken:changed-file}", "--text", "Hi."], "does not match its sha256"),
    "causal backbone in manifest": (["--model_dir", "{broken:causal-manifest}", "--text", "Hi."],
                                    "holds a causal backbone"),
    "causal backbone graph": (["--model_dir", "{broken:causal-graph}", "--text", "Hi."], "so it is causal"),
    "codec-only build": (["--model_dir", "{broken:codec-only}", "--text", "Hi."], "holds only a Higgs codec"),
    "backbone-only build without --higgs_dir": (["--model_dir", "{broken:backbone-only}", "--text", "Hi."],
                                               "holds no Higgs codec"),
    # A model folder that does not exist: the output path must be refused before it is looked at.
    "missing output folder": (["--model_dir", "{in}/no-model", "--text", "Hi.", "--output", "{in}/missing/out.wav"],
                              "does not exist"),
    "output folder is a file": (["--model_dir", "{in}/no-model", "--text", "Hi.", "--output", "{in}/a-file/out.wav"],
                                "is a file, not a folder"),
    "codes folder is a file": (["--text", "Hi.", "--codes_out", "{in}/a-file/codes.npy"], "is a file, not a folder"),
    "batch codes folder under a file": (["--jsonl", "{in}/good.jsonl", "--codes_out", "{in}/a-file/codes"],
                                        "cannot create folder"),
    "jsonl not json": (["--jsonl", "{in}/not-json.jsonl"], "line 2 is not valid JSON"),
    "jsonl without text": (["--jsonl", "{in}/no-text.jsonl"], 'line 2 needs an object with a "text" string'),
    "jsonl unknown key": (["--jsonl", "{in}/unknown-key.jsonl"], "line 2 has unknown key(s) volume"),
    "jsonl wrong type": (["--jsonl", "{in}/wrong-type.jsonl"], 'line 2: "speed" must be a number'),
    # Every line is checked before the first is spoken, so line 1 is not written either.
    "jsonl bad instruct": (["--jsonl", "{in}/bad-instruct.jsonl", "--batch_size", "1"], "conflicting instruct items"),
    "missing reference": (["--text", "Hi.", "--ref_audio", "{in}/nowhere.wav", "--ref_text", "Hi."],
                          "audio file not found"),
    "unreadable reference": (["--text", "Hi.", "--ref_audio", "{in}/not-audio.wav", "--ref_text", "Hi."],
                             "cannot read audio file"),
    "silent reference": (["--text", "Hi.", "--ref_audio", "{in}/silent.wav", "--ref_text", "Hi."],
                         "empty after silence removal"),
    "reference without transcript, no recogniser": (["--text", "Hi.", "--ref_audio", "{in}/long.wav",
                                                     "--save_voice", "{tmp}/voice.npz"],
                                                    "unless the build has a recogniser, and"),
    "--asr_dir without a recogniser": (["--text", "Hi.", "--asr_dir", "{in}"], "holds no recogniser"),
    # With a recogniser: each bad clip is refused before anything is saved.
    "empty clip, no transcript": (["--model_dir", "{asr}", "--text", "Hi.", "--ref_audio", "{in}/empty.wav",
                                   "--save_voice", "{tmp}/voice.npz"], "empty after silence removal"),
    "empty clip, no transcript, not preprocessed": (["--model_dir", "{asr}", "--text", "Hi.", "--ref_audio",
                                                     "{in}/empty.wav", "--preprocess_prompt", "false",
                                                     "--save_voice", "{tmp}/voice.npz"], "shorter than one codec frame"),
    "silent clip, no transcript": (["--model_dir", "{asr}", "--text", "Hi.", "--ref_audio", "{in}/silent.wav",
                                    "--save_voice", "{tmp}/voice.pt"], "empty after silence removal"),
    "clip over the recogniser's 30 s": (["--model_dir", "{asr}", "--text", "Hi.", "--ref_audio", "{in}/long.wav",
                                         "--preprocess_prompt", "false", "--save_voice", "{tmp}/voice.npz"],
                                        "the recogniser takes at most 30 s"),
    "jsonl clip without transcript, no recogniser": (["--jsonl", "{in}/clip-alone.jsonl"],
                                                     "unless the build has a recogniser, and"),
}


@pytest.mark.parametrize("case", BAD_INPUT)
def test_bad_input_is_one_error_line_and_writes_nothing(case, model_dir, broken_builds, builds, inputs, tmp_path):
    arguments, expected = BAD_INPUT[case]
    places = {"{in}": str(inputs), "{tmp}": str(tmp_path), **{f"{{broken:{name}}}": str(path) for name, path in broken_builds.items()}}
    if any("{asr}" in a for a in arguments):
        places["{asr}"] = str(builds.get(*ASR_BUILD))
    arguments = [_fill(a, places) for a in arguments]
    if "--model_dir" not in arguments:
        arguments = ["--model_dir", str(model_dir), *arguments]
    batch = "--jsonl" in arguments
    output = tmp_path / ("wavs" if batch else "out.wav")
    if "--output" not in arguments:
        arguments += ["--output", str(output)]
    else:
        output = Path(arguments[arguments.index("--output") + 1])

    result = run_script("inference.py", *FAST, *arguments)
    assert result.returncode == 2, result.stdout + result.stderr
    error = last_error_line(result)
    assert error.startswith("error: ") and expected in error, result.stderr
    assert result.stderr.count("error:") == 1 and "Traceback" not in result.stderr
    assert not output.is_file()
    assert [p for p in tmp_path.rglob("*") if p.is_file()] == []  # no temporaries either


def _fill(argument: str, places: dict) -> str:
    for key, value in places.items():
        argument = argument.replace(key, value)
    return argument
