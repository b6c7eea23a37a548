"""An aligner of its own (optimize.py --include-aligner): a Whisper built only to time words, in fp32 by default,
used for word timings where the build has one; and windows shared by pieces (Aligner.align_pieces), each piece's
words its own and on its own time, equal to openai-whisper's find_alignment over the same packed window."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from helpers.scripts import last_error_line, run_main
from helpers.synthesis_inputs import FP32_BUILD

from codes.common.errors import UserError
from codes.export.generated_higgs import speech_like_signal
from codes.runtime.audio.processing import resample
from codes.runtime.contract.manifest import read_manifest
from codes.runtime.recognition.aligner import Aligner, Piece
from codes.runtime.synthesis import OmniVoiceOnnx

ALIGNER_BUILD = (*FP32_BUILD, "--include-aligner", "--aligner-model", "tiny-whisper")
FRAME = 0.02  # one attention frame: the bound on every time
TEXTS = ["Good morning to you all.", "The next train leaves soon.", "Please mind the gap.", "Thank you, and goodbye."]


@pytest.fixture(scope="module")
def aligner_build(builds):
    return builds.get(*ALIGNER_BUILD)


@pytest.fixture(scope="module")
def aligner(aligner_build):
    return Aligner(aligner_build / "aligner", threads=2)


@pytest.fixture(scope="module")
def openai_model():
    import torch

    from codes.checks.equiv_words import openai_whisper_model
    from codes.export.whisper_checkpoint import generated_whisper

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield openai_whisper_model(generated_whisper("tiny-whisper"))
    torch.set_num_threads(previous)


def pieces(count: int, seconds: float = 3.0) -> list[Piece]:
    return [Piece(speech_like_signal(seconds, 24000, seed=i + 1), 24000, TEXTS[i % len(TEXTS)], "en")
            for i in range(count)]


def test_the_build_holds_an_fp32_aligner_which_times_words_without_a_recogniser(aligner_build, aligner):
    data = read_manifest(aligner_build).data
    assert data["aligner"]["precision"] == "fp32" and data["aligner"]["models_dir"] == "aligner" and "asr" not in data
    assert data["aligner"]["heads"] == json.loads((aligner.folder / "asr_manifest.json").read_text())["alignment"]["heads"]
    tts = OmniVoiceOnnx(aligner_build, threads=1)
    assert tts.has_word_timings and not tts.has_recogniser
    wav = tts.generate("Good morning to you all.", language="en", num_steps=4, seed=0)
    words = tts.align_words(wav, "Good morning to you all.", "en")
    assert [w["word"] for w in words] == ["Good", "morning", "to", "you", "all."]
    assert words == aligner.align(wav, 24000, "Good morning to you all.", "en")


def test_packed_windows_equal_openai_whispers_find_alignment(aligner, openai_model):
    from codes.checks.equiv_words import reference_words

    given = pieces(4)
    windows = aligner.packed_windows(given)
    assert len(windows) == 1 and windows[0].pieces == [0, 1, 2, 3]
    packed = np.concatenate([resample(p.waveform, 24000, 16000) for p in given])
    window = windows[0].window
    theirs = reference_words(openai_model, packed, [window], "en")
    assert [w["word"] for w in window.words] == [w["word"] for w in theirs]
    assert all(abs(a["start"] - b["start"]) <= FRAME + 1e-6 and abs(a["end"] - b["end"]) <= FRAME + 1e-6
               for a, b in zip(window.words, theirs))
    # each piece's words are the window's, in order, on the piece's time and within its audio
    assert [w["word"] for words in windows[0].words for w in words] == [w["word"] for w in window.words]
    on_window = iter(window.words)
    for words, offset, piece in zip(windows[0].words, windows[0].offsets, given):
        length = len(piece.waveform) / piece.sample_rate
        for word, whole in zip(words, on_window):
            assert word["start"] == round(min(max(whole["start"] - offset, 0.0), length), 3)


def test_each_piece_gets_its_own_words_on_its_own_time(aligner):
    given = pieces(4)
    timed = aligner.align_pieces(given)
    for piece, words in zip(given, timed):
        assert [w["word"] for w in words] == aligner.words_of(piece.text, "en")
        length = len(piece.waveform) / piece.sample_rate
        assert all(0 <= w["start"] <= w["end"] <= length + FRAME for w in words)


def test_pieces_share_a_window_per_30_seconds_of_audio(aligner):
    calls = []
    encode = aligner._encode
    aligner._encode = lambda segment: calls.append(1) or encode(segment)
    try:
        timed = aligner.align_pieces(pieces(15))  # 45 s: ten 3 s pieces fill a window, five the next
    finally:
        aligner._encode = encode
    assert len(calls) == 2 and len(timed) == 15 and all(timed)


def test_a_piece_with_nothing_to_align_gets_no_words_and_a_long_one_its_own_windows(aligner):
    short, empty = pieces(1)[0], Piece(speech_like_signal(2.0, 24000, 9), 24000, "... !", "en")
    long = Piece(speech_like_signal(35.0, 24000, 5), 24000, " ".join(TEXTS * 4), "en")
    timed = aligner.align_pieces([short, empty, long, short])
    assert timed[1] == [] and timed[2] == aligner.align(long.waveform, 24000, long.text, "en")
    assert timed[0] == timed[3] or [w["word"] for w in timed[0]] == [w["word"] for w in timed[3]]


def test_an_aligner_checkpoint_without_alignment_heads_is_refused_naming_the_flag(tmp_path):
    from codes.export.whisper_checkpoint import generated_whisper

    checkpoint = tmp_path / "whisper-no-heads"
    shutil.copytree(generated_whisper("tiny-whisper"), checkpoint)
    config = json.loads((checkpoint / "generation_config.json").read_text())
    config.pop("alignment_heads")
    (checkpoint / "generation_config.json").write_text(json.dumps(config))
    out = tmp_path / "build"
    result = run_main("optimize.py", "--model", "tiny-random", "--device", "cpu_fp32", "--output", out,
                      "--include-aligner", "--aligner-model", checkpoint)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "no alignment heads" in last_error_line(result) and "--aligner-heads" in last_error_line(result)
    assert not out.exists()
    result = run_main("optimize.py", "--model", "tiny-random", "--device", "cpu_fp32", "--output", out,
                      "--include-aligner", "--aligner-model", checkpoint, "--aligner-heads", "1:0,1:3")
    assert result.returncode == 0, result.stdout + result.stderr
    assert read_manifest(out).data["aligner"]["heads"] == [[1, 0], [1, 3]]


def test_a_damaged_aligner_is_one_line_and_speech_still_works(aligner_build, tmp_path):
    damaged = tmp_path / "damaged"
    shutil.copytree(aligner_build, damaged)
    (damaged / "aligner" / "asr_manifest.json").write_text("{}")
    tts = OmniVoiceOnnx(damaged, threads=1)
    assert tts.generate("Still speaking.", language="en", num_steps=2, seed=0).size > 0
    assert not tts.has_word_timings
    with pytest.raises(UserError, match="--include-aligner") as raised:
        tts.check_word_timings()
    assert "\n" not in str(raised.value)


def test_script_captions_pay_one_window_per_30_seconds(aligner_build, tmp_path):
    from codes.runtime.script import speak_script

    tts = OmniVoiceOnnx(aligner_build, threads=1)
    aligner = tts.load_aligner()
    calls = []
    encode = aligner._encode
    aligner._encode = lambda segment: calls.append(1) or encode(segment)
    text = "\n".join(f"Alice: {line}" for line in TEXTS)
    rendered = speak_script(tts, text=text, speakers={"Alice": "instruct:female"}, seed=0, num_steps=2,
                            caption_words=True)
    assert len(rendered.captions) == 4 and all(caption.words for caption in rendered.captions)
    assert len(calls) == 1  # four cues, about 8 s of speech: one window


def test_the_dub_benchmark_compares_a_dub_without_and_with_word_captions(aligner_build, tmp_path):
    """bench/script_cluster_bench.py --compare words on the tiny model: a smoke test (no timing assertions)."""
    from codes.checks.script_cluster_bench import markdown, run_benchmark

    report = run_benchmark(aligner_build, None, cues=3, num_steps=2, threads=2, work=tmp_path, compare="words",
                           log=lambda line: None)
    assert [row["mode"] for row in report["rows"]] == ["without word captions", "with word captions"]
    assert report["same_file"] and (tmp_path / "words.srt").is_file()
    page = "\n".join(markdown(report, "python bench/script_cluster_bench.py --compare words ..."))
    assert "what --caption_words adds" in page and "against without word captions" in page
