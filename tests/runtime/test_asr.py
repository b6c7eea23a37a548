"""The ONNX recogniser's transcript is upstream's: transformers' ASR pipeline text, character for character.

Upstream (`OmniVoice.transcribe`) calls `pipeline("automatic-speech-recognition", model=<Whisper>,
dtype=float32, device="cpu")` on the prepared 24 kHz clip and strips the text; these tests make the
same call on the same random checkpoint (`tiny-whisper`: large-v3's vocabulary, turbo's generation
config) and compare.
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
from codes.runtime.recognition import asr as ours

REPO_ROOT = Path(__file__).resolve().parents[2]
# (seconds, sample rate, seed): upstream hands the recogniser 24 kHz; other rates go through the same resampler
CLIPS = [(3, 24000, 1), (10, 24000, 2), (20, 24000, 3), (6, 16000, 4), (8, 44100, 5), (29.5, 22050, 9)]


@pytest.fixture(scope="module")
def whisper_folder():
    from codes.export.whisper_checkpoint import generated_whisper

    return generated_whisper("tiny-whisper")


@pytest.fixture(scope="module")
def fp32_build(whisper_folder, tmp_path_factory):
    from codes.export.asr_build import build_asr

    return build_asr(str(whisper_folder), tmp_path_factory.mktemp("asr-fp32"), "fp32")


@pytest.fixture(scope="module")
def recogniser(fp32_build):
    return ours.Recogniser(fp32_build, threads=2)


@pytest.fixture(scope="module")
def upstream_pipeline(whisper_folder):
    import torch
    from transformers import pipeline

    # omnivoice's load_asr_model on CPU: this call, then transcribe() = pipe({"array", "sampling_rate"})["text"].strip()
    return pipeline("automatic-speech-recognition", model=str(whisper_folder), dtype=torch.float32, device="cpu")


def upstream_text(pipe, wav: np.ndarray, rate: int) -> str:
    return pipe({"array": wav, "sampling_rate": rate})["text"].strip()


@pytest.mark.parametrize("seconds,rate,seed", CLIPS)
def test_transcript_equals_the_pipeline(recogniser, upstream_pipeline, seconds, rate, seed):
    wav = speech_like_signal(seconds, rate, seed)
    assert recogniser.transcribe(wav, rate) == upstream_text(upstream_pipeline, wav, rate)


def test_a_clip_over_20_s_is_trimmed_then_transcribed_as_upstream(recogniser, upstream_pipeline):
    """Without a transcript upstream trims a clip over 20 s (at a pause within 15 s), removes silences,
    then transcribes: the recogniser never sees more than 20 s."""
    from codes.runtime.audio.processing import remove_silence, trim_long_audio

    wav = speech_like_signal(34, 24000, seed=11)
    prepared = remove_silence(trim_long_audio(wav, 24000, trim_threshold=20.0), 24000,
                              mid_sil_ms=200, lead_sil_ms=100, trail_sil_ms=200)
    assert len(prepared) / 24000 <= 15.0
    assert recogniser.transcribe(prepared, 24000) == upstream_text(upstream_pipeline, prepared, 24000)


def test_the_test_model_listens(recogniser):
    """Random weights must give text that follows the clip, or the parity above proves little."""
    texts = [recogniser.transcribe(speech_like_signal(s, r, seed), r) for s, r, seed in CLIPS[:5]]
    assert all(texts) and len(set(texts)) >= 4
    wav = speech_like_signal(10, 24000, 2)
    nudged = wav * (1 + 1e-5 * np.random.default_rng(0).standard_normal(len(wav))).astype(np.float32)
    assert recogniser.transcribe(nudged, 24000) == texts[1]


def test_generation_settings_are_the_pipelines(fp32_build):
    """transformers 5's pipeline adds num_beams=5; its max_new_tokens=256 yields to turbo's max_length 448."""
    generation = json.loads((fp32_build / ours.MANIFEST_NAME).read_text())["generation"]
    assert generation["num_beams"] == 5 and generation["max_new_tokens"] is None and generation["max_length"] == 448
    assert generation["init_tokens"] == [50258, None, 50360, 50364]  # sot, detected language, transcribe, notimestamps
    assert len(generation["language_ids"]) == 100


@pytest.mark.parametrize("seconds", [0.5, 7.3, 30.0])
def test_features_equal_whisper_feature_extractor(whisper_folder, recogniser, seconds):
    from transformers import WhisperFeatureExtractor

    extractor = WhisperFeatureExtractor.from_pretrained(str(whisper_folder))
    wav = speech_like_signal(seconds, 16000, seed=3)
    theirs = extractor(wav, sampling_rate=16000, return_tensors="np").input_features[0]
    mine = recogniser.features_of(wav, 16000)
    assert mine.shape == theirs.shape == (128, 3000)
    # The extractor's float32 torch.stft rounds low-energy bins by up to ~4e-5 (a float64 FFT is
    # closer to exact than either): all but a handful of cells agree to 1e-5, all to 1e-4.
    error = np.abs(mine - theirs)
    assert error.max() < 1e-4 and np.mean(error > 1e-5) < 1e-3


@pytest.mark.parametrize("rate", [24000, 44100, 8000])
def test_resampling_is_the_pipelines_torchaudio(rate):
    import torch
    from torchaudio import functional as F

    from codes.runtime.audio.processing import resample

    wav = speech_like_signal(2.3, rate, seed=5)
    np.testing.assert_allclose(resample(wav, rate, 16000), F.resample(torch.from_numpy(wav), rate, 16000).numpy(),
                               atol=1e-5, rtol=0)  # float32 rounding of the sinc sums


def test_text_pieces_equal_decode_asr(upstream_pipeline, recogniser):
    """Language tokens and timestamps inside the output split and merge text as `_decode_asr` does."""
    import torch

    tokenizer = upstream_pipeline.tokenizer
    rng = np.random.default_rng(7)
    text_ids = list(range(200, 5000))
    specials = [50259, 50260, 50261, 50359, 50363]
    stamps = list(range(50365, 50465))
    for _ in range(60):
        tokens = []
        for _ in range(int(rng.integers(1, 40))):
            kind = rng.uniform()
            pool = text_ids if kind < 0.7 else specials if kind < 0.8 else stamps
            tokens.append(int(rng.choice(pool)))
        theirs, _ = tokenizer._decode_asr([{"tokens": torch.tensor([tokens])}], return_timestamps=None,
                                          return_language=None, time_precision=0.02)
        assert recogniser.text_of(tokens) == theirs, tokens


def test_segments_equal_retrieve_segment():
    """A timestamp pair ends a segment and moves the seek, as WhisperGenerationMixin._retrieve_segment."""
    import torch
    from transformers.models.whisper.generation_whisper import WhisperGenerationMixin

    begin = 50365
    cases = [[10, 20, 30], [10, begin + 5, begin + 5, 40, 41], [begin, 11, begin + 50, begin + 50, 12, begin + 70],
             [13, begin + 40], [begin + 3, 14, begin + 9, begin + 9, 15, begin + 30, begin + 30]]
    for tokens in cases:
        segments, offset = WhisperGenerationMixin._retrieve_segment(
            torch.tensor(tokens), [None], torch.zeros(1, dtype=torch.float64), begin, torch.tensor([3000]), 0.02,
            0.01, 2, 0, 0, False, torch.zeros(1, 4))
        slices, my_offset = ours.split_segments(tokens, begin, 3000)
        assert [s["tokens"].tolist() for s in segments] == slices and int(offset) == my_offset


def test_the_runtime_imports_no_torch(fp32_build):
    script = (
        "import sys, numpy as np\n"
        "from codes.runtime.recognition.asr import Recogniser\n"
        "from codes.export.generated_higgs import speech_like_signal\n"
        f"text = Recogniser({str(fp32_build)!r}, threads=1).transcribe(speech_like_signal(3, 24000, 1), 24000)\n"
        "print(repr(text), sorted(m for m in ('torch', 'torchaudio', 'transformers', 'omnivoice') if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip().endswith("[]")


@pytest.mark.parametrize("wav,rate,needle", [
    (np.zeros(0, np.float32), 24000, "non-empty"),
    (np.full(2400, np.nan, np.float32), 24000, "NaN"),
    (speech_like_signal(31, 16000, 1), 16000, "at most 30 s"),
    (speech_like_signal(1, 16000, 1), 0, "positive"),
])
def test_bad_clips_get_one_clear_line(recogniser, wav, rate, needle):
    with pytest.raises(UserError, match=needle) as raised:
        recogniser.transcribe(wav, rate)
    assert "\n" not in str(raised.value)


def test_a_folder_without_a_recogniser_names_the_flag(tmp_path):
    with pytest.raises(UserError, match="--include-asr"):
        ours.Recogniser(tmp_path)


def test_int8_build_runs_and_its_agreement_is_reported(whisper_folder, recogniser, tmp_path, record_property):
    """int8 (the backbone's scheme, uncalibrated) is reported, not held equal: random weights quantize worse than trained."""
    from codes.export.asr_build import build_asr

    int8 = ours.Recogniser(build_asr(str(whisper_folder), tmp_path, "int8"), threads=2)
    same = 0
    for seconds, rate, seed in CLIPS[:4]:
        wav = speech_like_signal(seconds, rate, seed)
        text = int8.transcribe(wav, rate)
        assert isinstance(text, str)
        same += text == recogniser.transcribe(wav, rate)
    record_property("int8_transcripts_equal_fp32", f"{same}/4")
    print(f"int8 transcripts equal to fp32: {same}/4")


# ---------------------------------------------------------------------------
# A clip without its transcript, end to end, against upstream with the same Whisper
# ---------------------------------------------------------------------------

CLONED_TEXT = "Nice to hear it cloned."
GREEDY_STEPS = dict(num_step=8, position_temperature=0.0, class_temperature=0.0)


@pytest.fixture(scope="module")
def upstream_cloner(tiny_checkpoint, whisper_folder):
    """Upstream OmniVoice with its ASR pipeline on the same tiny Whisper the build's recogniser came from."""
    import torch
    from omnivoice.models.omnivoice import OmniVoice

    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield OmniVoice.from_pretrained(str(tiny_checkpoint.path), attn_implementation="sdpa",
                                    asr_model_name=str(whisper_folder), load_asr=True).eval()
    torch.set_num_threads(previous)


def test_a_clip_alone_through_inference_equals_upstream_generate(asr_build, upstream_cloner, tmp_path):
    from helpers.scripts import run_script
    from helpers.synthesis_inputs import REF_TEXT, reference_clip, write_clip
    from helpers.upstream_twins import recorded_codes

    from codes.runtime.request import Voice
    from codes.runtime.synthesis import OmniVoiceOnnx

    clip = write_clip(tmp_path / "ref.wav", reference_clip(24000), 24000)
    with recorded_codes(upstream_cloner) as calls:
        upstream_cloner.generate(CLONED_TEXT, language="en", ref_audio=str(clip), ref_text=None, **GREEDY_STEPS)
    prompt = upstream_cloner.create_voice_clone_prompt(str(clip))
    result = run_script("inference.py", "--model_dir", asr_build, "--text", CLONED_TEXT, "--language", "en",
                        "--ref_audio", clip, "--num_steps", "8", "--position_temperature", "0",
                        "--class_temperature", "0", "--threads", "1", "--quiet", "--output", tmp_path / "out.wav",
                        "--codes_out", tmp_path / "codes.npy", "--save_voice", tmp_path / "voice.npz")
    assert result.returncode == 0, result.stderr
    voice = Voice.load(tmp_path / "voice.npz")
    assert voice.text == prompt.ref_text and len(voice.text) > 10  # the recogniser heard words, as upstream's did
    np.testing.assert_array_equal(voice.codes, prompt.ref_audio_tokens.numpy())
    codes = np.load(tmp_path / "codes.npy")
    np.testing.assert_array_equal(codes, calls[0][0])
    # The transcript is what the prompt carries: the clip with another transcript clones other codes.
    _, given = OmniVoiceOnnx(asr_build, threads=1).generate(CLONED_TEXT, language="en", ref_audio=clip,
                                                            ref_text=REF_TEXT, num_steps=8, position_temperature=0.0,
                                                            class_temperature=0.0, return_codes=True)
    assert given.shape != codes.shape or not np.array_equal(given, codes)


@pytest.mark.parametrize("seconds,preprocess_prompt", [(34.0, True), (6.0, False)])
def test_a_clip_is_prepared_then_transcribed_as_upstream_create_voice_clone_prompt(asr_build, upstream_cloner, seconds,
                                                                                   preprocess_prompt):
    """Over 20 s, upstream trims the clip at a pause within 15 s (trim_long_audio), removes silences, then
    transcribes; a 34 s clip, which the recogniser alone refuses, clones. Without preprocessing the clip is
    transcribed as it is and the text keeps no added punctuation."""
    import torch

    from codes.runtime.synthesis import OmniVoiceOnnx

    wav = speech_like_signal(seconds, 24000, seed=11)
    tts = OmniVoiceOnnx(asr_build, threads=1)
    ours = tts.create_voice((wav, 24000), None, preprocess_prompt)
    theirs = upstream_cloner.create_voice_clone_prompt((torch.from_numpy(wav), 24000), None, preprocess_prompt)
    assert ours.text == theirs.ref_text and ours.text
    assert tts.transcribe_reference((wav, 24000), preprocess_prompt) == ours.text
    assert ours.rms == theirs.ref_rms
    np.testing.assert_array_equal(ours.codes, theirs.ref_audio_tokens.numpy())
    if seconds > 30:
        assert ours.codes.shape[1] <= 15 * 25
        with pytest.raises(UserError, match="at most 30 s"):
            tts.load_recogniser().transcribe(wav, 24000)


# ---------------------------------------------------------------------------
# A Whisper whose attention q/v biases are all zero (issue 42): genai's builder leaves the encoder's bias
# out, on which ONNX Runtime's CPU Attention kernel segfaulted; the build puts it back
# ---------------------------------------------------------------------------

def test_a_whisper_with_zero_qv_biases_clones_a_clip_alone_through_inference(builds, tiny_checkpoint, tmp_path):
    import torch
    from helpers.scripts import run_main, run_script
    from helpers.synthesis_inputs import FP32_BUILD, reference_clip, write_clip
    from omnivoice.models.omnivoice import OmniVoice

    from codes.export.whisper_checkpoint import generated_whisper
    from codes.runtime.request import Voice

    zero_bias = generated_whisper("tiny-whisper", zero_qv_biases=True)
    run_main("optimize.py", "--asr-only", "--asr-model", zero_bias, "--device", "cpu_fp32", "--output",
             tmp_path / "asr-build", check=True)
    clip = write_clip(tmp_path / "ref.wav", reference_clip(24000), 24000)
    result = run_script("inference.py", "--model_dir", builds.get(*FP32_BUILD), "--asr_dir", tmp_path / "asr-build",
                        "--text", CLONED_TEXT, "--language", "en", "--ref_audio", clip, "--num_steps", "4",
                        "--threads", "1", "--quiet", "--output", tmp_path / "out.wav",
                        "--save_voice", tmp_path / "voice.npz")
    assert result.returncode == 0, f"exit {result.returncode}: {result.stderr[-2000:]}"  # -11 was the segfault
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        upstream = OmniVoice.from_pretrained(str(tiny_checkpoint.path), attn_implementation="sdpa",
                                             asr_model_name=str(zero_bias), load_asr=True).eval()
        expected = upstream.create_voice_clone_prompt(str(clip)).ref_text
    finally:
        torch.set_num_threads(previous)
    assert Voice.load(tmp_path / "voice.npz").text == expected and len(expected) > 10
