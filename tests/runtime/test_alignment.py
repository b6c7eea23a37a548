"""Word timings equal openai-whisper's forced alignment (`whisper.timing.find_alignment`) on the same weights.

Each small function of codes/runtime/recognition/alignment.py against its twin in openai-whisper, then whole clips:
the aligner built from the tiny random Whisper against openai-whisper's `Whisper` module loaded with
the same checkpoint, for the same 16 kHz samples: the same words, and times within one 20 ms frame. The
full-size check (turbo's shapes and heads) runs in bench/words_bench.py (bench/words_results.md).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from codes.common.errors import UserError
from codes.export.generated_higgs import speech_like_signal
from codes.runtime.recognition import alignment
from codes.runtime.recognition.aligner import Aligner
from codes.runtime.recognition.asr import Recogniser

REPO_ROOT = Path(__file__).resolve().parents[2]
FRAME = 0.02  # one attention frame: the bound on every time
LONG_TEXT = " ".join(f"Sentence number {i} goes on for a while, and then it stops." for i in range(40))
# (language, text as spoken, seconds, seed): at least one clip over 30 s, one in a language without spaces,
# one whose text normalize_text changed (CLIP_WRITTEN)
CLIPS = {
    "english": ("en", 'Hello there, my "dear" friend. How are you?', 5.0, 1),
    "chinese": ("zh", "你好，我的朋友。今天天气很好。", 4.0, 2),
    "japanese": ("ja", "東京は日本の首都です。カタカナとひらがな。", 5.0, 3),
    "normalized": ("en", "doctor Smith paid five dollars for two apples on the fourth of march twenty twenty one.",
                   6.0, 4),
    "over_30_s": ("en", LONG_TEXT, 47.0, 5),
    "pause_after_the_text": ("en", "Short words, then a long pause.", 42.0, 6),
}
CLIP_WRITTEN = "Dr. Smith paid $5 for 2 apples on 3/4/2021."


@pytest.fixture(scope="module")
def whisper_folder():
    from codes.export.whisper_checkpoint import generated_whisper

    return generated_whisper("tiny-whisper")


@pytest.fixture(scope="module")
def aligner(whisper_folder, tmp_path_factory):
    """The recogniser's folder (asr/) aligned by an Aligner, as a build without an aligner of its own does."""
    from codes.export.asr_build import build_asr

    return Aligner(build_asr(str(whisper_folder), tmp_path_factory.mktemp("asr-fp32"), "fp32"), threads=2)


@pytest.fixture(scope="module")
def openai_model(whisper_folder):
    import torch

    from codes.checks.equiv_words import openai_whisper_model

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield openai_whisper_model(whisper_folder)
    torch.set_num_threads(previous)


# ---------------------------------------------------------------------------
# function by function
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 9, 40), (2, 5, 3), (1, 4, 4), (6, 30, 750)])
def test_median_filter_equals_openai_whispers(shape):
    import torch
    from whisper.timing import median_filter

    x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(alignment.median_filter(x, 7), median_filter(torch.from_numpy(x), 7).numpy())


@pytest.mark.parametrize("shape,values", [((12, 80), 3), ((40, 30), 2), ((1, 9), 3), ((9, 1), 3), ((25, 400), 0)])
def test_dtw_equals_dtw_cpu_ties_included(shape, values):
    """Small integer costs tie everywhere, which is where another DTW would choose otherwise."""
    from whisper.timing import dtw_cpu

    rng = np.random.default_rng(shape[0] * 1000 + shape[1])
    x = (rng.integers(0, values, shape) if values else rng.standard_normal(shape)).astype(np.float32)
    ours = alignment.dtw(x)
    theirs = dtw_cpu(x.astype(np.float64))
    np.testing.assert_array_equal(np.stack(ours), theirs)


def test_open_end_dtw_ends_on_the_cheapest_row_with_dtw_cpus_path():
    """Ending free at the last frame is DTW on the text's first rows, those whose whole path costs least."""
    from whisper.timing import dtw_cpu

    x = np.random.default_rng(7).standard_normal((30, 60)).astype(np.float32)
    text_indices, time_indices = alignment.dtw_open_end(x)
    rows = int(text_indices[-1]) + 1
    cost, _ = alignment.dtw_trace(x)
    assert rows == 1 + int(np.argmin(cost[1:, -1])) and time_indices[-1] == x.shape[1] - 1
    np.testing.assert_array_equal(np.stack([text_indices, time_indices]), dtw_cpu(x[:rows].astype(np.float64)))


def test_softmax_and_standardization_equal_torch():
    import torch

    qk = np.random.default_rng(3).standard_normal((3, 12, 100)).astype(np.float32) * 4
    weights = torch.from_numpy(qk).softmax(dim=-1)
    std, mean = torch.std_mean(weights, dim=-2, keepdim=True, unbiased=False)
    np.testing.assert_allclose(alignment.softmax(qk), weights.numpy(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(alignment.standardize_over_tokens(weights.numpy()), ((weights - mean) / std).numpy(),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("language,text", [
    ("en", " Hello, world! It's 2024; we'll see: 3.14... Don't stop \"now\" (please)."),
    ("de", " Grüße aus Köln – schöne Straße!"),
    ("zh", "今天天气很好，我们去公园散步吧。"),
    ("ja", "東京は日本の首都です。カタカナ、ひらがな！"),
    ("th", "สวัสดีครับ ยินดีที่ได้รู้จัก"),
    ("yue", "我哋今日去飲茶啦。"),
])
def test_word_split_equals_openai_whispers_tokenizer(aligner, language, text):
    from codes.checks.equiv_words import openai_tokenizer

    tokenizer = openai_tokenizer(language)
    tokens = tokenizer.encode(text) + [tokenizer.eot]
    assert aligner.text_tokens(text, language) == tokenizer.encode(
        text if language in alignment.UNSPACED_LANGUAGES else " " + text.strip())
    ours = alignment.split_to_word_tokens(tokens, language, aligner.decode_bytes, tokenizer.eot)
    assert ours == tokenizer.split_to_word_tokens(tokens)


def test_merge_punctuations_equals_openai_whispers():
    from whisper.timing import WordTiming, merge_punctuations

    words = [' "', "Well", ",", " (", " ¿", "so", ")", " it", "'s", " -", "done", ".", "”", " ok", " !", "?"]
    timed = [alignment.TimedWord(w, [i], i * 0.1, i * 0.1 + 0.05) for i, w in enumerate(words)]
    theirs = [WordTiming(w, [i], i * 0.1, i * 0.1 + 0.05, 1.0) for i, w in enumerate(words)]
    merge_punctuations(theirs, alignment.PREPEND_PUNCTUATIONS, alignment.APPEND_PUNCTUATIONS)
    merged = alignment.merge_punctuations(timed)
    assert [(w.word, w.tokens, w.start, w.end) for w in merged] == [(w.word, w.tokens, w.start, w.end) for w in theirs]
    assert [w.word for w in timed] == words  # a copy: the input is left as it was


def test_written_words_replace_spoken_ones_only_one_to_one():
    spoken = ["doctor", "Smith", "paid", "five", "dollars", "for", "two", "apples."]
    written = ["Dr.", "Smith", "paid", "$5", "for", "2", "apples."]
    assert alignment.written_forms(spoken, written) == ["Dr.", "Smith", "paid", "five", "dollars", "for", "2",
                                                        "apples."]
    assert alignment.written_forms(["Hello,", "world"], ["hello", "World!"]) == ["hello", "World!"]
    assert alignment.written_forms(["a", "b"], []) == ["a", "b"]


# ---------------------------------------------------------------------------
# whole clips against find_alignment on the same weights
# ---------------------------------------------------------------------------

def reference(openai_model, wav, windows, language):
    from codes.checks.equiv_words import reference_words

    return reference_words(openai_model, wav, windows, language)


@pytest.mark.parametrize("clip", list(CLIPS))
def test_words_and_times_equal_find_alignments(aligner, openai_model, clip):
    from codes.checks.equiv_words import largest_time_difference, openai_tokenizer

    language, text, seconds, seed = CLIPS[clip]
    wav = speech_like_signal(seconds, 16000, seed)
    windows = aligner.aligned_windows(wav, 16000, text, language)
    tokenizer = openai_tokenizer(language)
    assert [t for w in windows for t in w.tokens] == tokenizer.encode(
        text if language in alignment.UNSPACED_LANGUAGES else " " + text)
    ours = [word for window in windows for word in window.words]
    theirs = reference(openai_model, wav, windows, language)
    assert [w["word"] for w in ours] == [w["word"] for w in theirs] and len(ours) >= 5
    assert largest_time_difference(ours, theirs) <= FRAME + 1e-9
    assert ours == aligner.align(wav, 16000, text, language)
    assert all(w["start"] <= w["end"] for w in ours) and ours[-1]["end"] <= seconds
    if seconds > 30:
        assert all(0 < w.num_frames <= 3000 for w in windows)
        assert [w.seek for w in windows] == sorted({w.seek for w in windows})


def test_a_text_longer_than_the_decoder_takes_is_aligned_over_several_windows(aligner):
    """The long clip's text (600 tokens) is more than one window's decoder reads (448): each window ends
    where its first pass put the next word, and the next starts there."""
    language, text, seconds, seed = CLIPS["over_30_s"]
    windows = aligner.aligned_windows(speech_like_signal(seconds, 16000, seed), 16000, text, language)
    assert len(windows) >= 2 and sum(len(w.tokens) for w in windows) > 448
    assert all(a.seek + a.num_frames == b.seek for a, b in zip(windows, windows[1:]))
    assert windows[-1].seek + windows[-1].num_frames == int(seconds * 100)  # the last reads the clip to its end
    words = [word for window in windows for word in window.words]
    assert all(a["start"] <= b["start"] for a, b in zip(words, words[1:]))


def test_a_pause_after_the_text_is_left_to_the_last_word(aligner):
    language, text, seconds, seed = CLIPS["pause_after_the_text"]
    windows = aligner.aligned_windows(speech_like_signal(seconds, 16000, seed), 16000, text, language)
    assert len(windows) == 1 and windows[0].num_frames == 3000  # no window past the text's last word


def test_words_are_reported_as_written_where_normalize_text_kept_them_one_to_one(aligner, openai_model):
    from codes.runtime.text.normalize import normalize_text

    language, spoken, seconds, seed = CLIPS["normalized"]
    assert normalize_text(CLIP_WRITTEN, language) == spoken  # the clip's text is what normalize_text made
    wav = speech_like_signal(seconds, 16000, seed)
    as_spoken = aligner.align(wav, 16000, spoken, language)
    as_written = aligner.align(wav, 16000, spoken, language, written=CLIP_WRITTEN)
    assert [w["word"] for w in as_written] == ["Dr.", "Smith", "paid", "five", "dollars", "for", "2", "apples", "on",
                                              "the", "fourth", "of", "march", "twenty", "twenty", "one."]
    assert [(w["start"], w["end"]) for w in as_written] == [(w["start"], w["end"]) for w in as_spoken]


# ---------------------------------------------------------------------------
# through OmniVoiceOnnx, and bad input
# ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tts(builds):
    from helpers.synthesis_inputs import ASR_BUILD

    from codes.runtime.synthesis import OmniVoiceOnnx

    return OmniVoiceOnnx(builds.get(*ASR_BUILD), threads=1)


def test_align_words_times_a_synthesized_utterance_as_find_alignment(tts, openai_model):
    """What a door calls: the 24 kHz audio generate made from a normalized text, that text and the one written."""
    from codes.runtime.audio.processing import resample
    from codes.runtime.text.normalize import normalize_text

    written = "I have 2345 apples, Dr. Jones."
    audio = tts.generate(written, language="en", normalize_text=True, num_steps=4, seed=0)
    spoken = normalize_text(written, "en")
    words = tts.align_words(audio, spoken, "en", written=written)
    assert tts.has_word_timings and words[0]["word"] == "I" and words[-1]["word"] == "Jones."
    assert "Dr." in [w["word"] for w in words] and "2345" not in [w["word"] for w in words]
    aligner = tts.load_aligner()
    wav_16k = resample(audio, 24000, 16000)
    windows = aligner.aligned_windows(wav_16k, 16000, spoken, "en")
    theirs = reference(openai_model, wav_16k, windows, "en")
    assert [(w["start"], w["end"]) for w in words] == [(w["start"], w["end"]) for w in windows[0].words]
    assert all(abs(a["start"] - b["start"]) <= FRAME + 1e-9 and abs(a["end"] - b["end"]) <= FRAME + 1e-9
               for a, b in zip(words, theirs))


@pytest.mark.parametrize("text", ["", "   ", "[laughter]", "[laughter] [sigh]", "...", "—!?"])
def test_text_with_nothing_to_align_gives_no_words(tts, text):
    assert tts.align_words(speech_like_signal(1.0, 24000, 1), text, "en") == []


@pytest.mark.parametrize("wav,needle", [(np.zeros(0, np.float32), "non-empty"),
                                        (np.zeros(200, np.float32), "at least 20 ms"),
                                        (np.full(2400, np.inf, np.float32), "NaN or infinite")])
def test_audio_with_nothing_to_align_against_is_one_line(tts, wav, needle):
    with pytest.raises(UserError, match=needle) as raised:
        tts.align_words(wav, "Hello there.", "en")
    assert "\n" not in str(raised.value)


def test_tags_are_not_words_and_an_unknown_language_is_detected(tts):
    wav = speech_like_signal(3.0, 24000, 2)
    tagged = tts.align_words(wav, "[laughter] Hello [B EY1 S] there.", "en")
    assert [w["word"] for w in tagged] == ["Hello", "there."]
    assert tts.align_words(wav, "Hello there.", "no such language") == tts.align_words(wav, "Hello there.", None)


def _as_built_before_word_timings(asr_dir: Path) -> None:
    """A recogniser folder as builds before word timings wrote it: the decoder without its alignment output,
    the manifest without its alignment section."""
    import onnx

    from codes.common.fileio import sha256_file
    from codes.export.onnx_io import save_model
    from codes.runtime.recognition.asr import ALIGNMENT_OUTPUT

    decoder = onnx.load(str(asr_dir / "decoder.onnx"))
    outputs = [o.name for o in decoder.graph.output if o.name != ALIGNMENT_OUTPUT]
    inputs = [i.name for i in decoder.graph.input]
    older = onnx.utils.Extractor(decoder).extract_model(inputs, outputs)
    save_model(older, asr_dir / "decoder.onnx")
    manifest = json.loads((asr_dir / "asr_manifest.json").read_text())
    del manifest["alignment"]
    manifest["graphs"]["decoder"].update(sha256=sha256_file(asr_dir / "decoder.onnx"),
                                         data_sha256=sha256_file(asr_dir / "decoder.onnx.data"))
    (asr_dir / "asr_manifest.json").write_text(json.dumps(manifest))


def test_a_recogniser_built_before_word_timings_transcribes_and_says_to_rebuild(whisper_folder, aligner, builds,
                                                                                tmp_path):
    from helpers.synthesis_inputs import FP32_BUILD

    from codes.export.asr_build import build_asr
    from codes.runtime.synthesis import OmniVoiceOnnx

    older_dir = build_asr(str(whisper_folder), tmp_path, "fp32")
    _as_built_before_word_timings(older_dir)
    older = Recogniser(older_dir, threads=2)
    wav = speech_like_signal(4.0, 24000, 3)
    assert not older.has_alignment
    assert older.transcribe(wav, 24000) == Recogniser(aligner.folder, threads=2).transcribe(wav, 24000)
    with pytest.raises(UserError, match="built before word timings; rebuild the recogniser with optimize.py "
                                        "--include-asr") as raised:
        Aligner(older_dir, threads=2).align(wav, 24000, "Hello there.", "en")
    assert "\n" not in str(raised.value)
    tts = OmniVoiceOnnx(builds.get(*FP32_BUILD), threads=1, asr_dir=older_dir)
    assert tts.has_recogniser and not tts.has_word_timings
    with pytest.raises(UserError, match="built before word timings"):
        tts.align_words(wav, "Hello there.", "en")
    no_recogniser = OmniVoiceOnnx(builds.get(*FP32_BUILD), threads=1)
    assert not no_recogniser.has_word_timings
    with pytest.raises(UserError, match="--include-asr"):
        no_recogniser.align_words(wav, "Hello there.", "en")


def test_aligning_imports_no_torch(aligner):
    script = (
        "import sys\n"
        "from codes.runtime.recognition.aligner import Aligner\n"
        "from codes.export.generated_higgs import speech_like_signal\n"
        f"words = Aligner({str(aligner.folder)!r}, threads=1).align(speech_like_signal(3, 24000, 1), 24000, "
        "'Hello there, friend.', 'en')\n"
        "print(len(words), sorted(m for m in ('torch', 'torchaudio', 'transformers', 'whisper', 'numba') "
        "if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "3 []"
