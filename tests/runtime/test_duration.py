"""codes.runtime.text.duration against upstream's RuleDurationEstimator and target-length rules."""

from __future__ import annotations

import random
import sys

import pytest
import torch
from helpers.upstream_twins import extraction_tool, upstream_self

from omnivoice.models.omnivoice import VoiceClonePrompt
from omnivoice.utils.duration import RuleDurationEstimator

from codes.runtime.data import load_table
from codes.runtime.text import duration

ESTIMATOR = RuleDurationEstimator()

TEXTS = [
    "",
    "Nice to meet you.",
    "Hello, world.",
    "नमस्ते दुनिया",
    "مَرْحَبًا بِالْعَالَم",
    "Chào thế giới",
    "你好，世界！",
    "Hello 🌍! This is fun 🎉",
    "東京は日本の首都です。カタカナとひらがな。",
    "안녕하세요, 세계! 반갑습니다.",
    "Это тест 123 с цифрами 4567.",
    "𠀀𠀁 ancient 𓀀 glyphs \U0001f600",
    "A much longer English paragraph that should take well over two seconds to speak, "
    "so the estimate is past the short-utterance boost and scales linearly with its weight.",
]


def test_duration_json_equals_upstream_table():
    assert load_table("duration_weights") == extraction_tool().duration_table()


def test_char_weight_equals_upstream_for_every_code_point():
    # The whole BMP, plus a sample of the supplementary planes (CJK extensions, emoji, private use).
    code_points = list(range(0x10000)) + list(range(0x10000, sys.maxunicode + 1, 97))
    for code in code_points:
        char = chr(code)
        assert duration.char_weight(char) == ESTIMATOR._get_char_weight(char), hex(code)


@pytest.mark.parametrize("target", TEXTS)
@pytest.mark.parametrize(
    "ref_text, ref_frames", [("Nice to meet you.", 25), ("Hello, world.", 37.5), ("你好", 40), ("", 30), ("...", 0)]
)
def test_estimate_frames_equals_upstream(target, ref_text, ref_frames):
    assert duration.estimate_frames(target, ref_text, ref_frames) == ESTIMATOR.estimate_duration(
        target, ref_text, ref_frames
    )


@pytest.mark.parametrize("target", TEXTS)
@pytest.mark.parametrize(
    "ref_text, ref_frames", [(None, None), ("", 80), ("Some reference words.", None), ("参考音频的文本。", 120)]
)
@pytest.mark.parametrize("speed", [1.0, 0.7, 1.5, 0.0, -1.0])
def test_estimate_target_tokens_equals_upstream(target, ref_text, ref_frames, speed):
    upstream = upstream_self(duration_estimator=ESTIMATOR)
    expected = upstream._estimate_target_tokens(target, ref_text, ref_frames, speed=speed)
    assert duration.estimate_target_tokens(target, ref_text, ref_frames, speed=speed) == expected


def test_without_reference_the_rate_is_nice_to_meet_you_in_25_frames():
    expected = int(duration.estimate_frames("Some words to say.", "Nice to meet you.", 25))
    assert duration.estimate_target_tokens("Some words to say.", None, None) == expected
    assert duration.estimate_target_tokens("Some words to say.", "", 80) == expected


# int() truncates a float product, as upstream: 10.04 * 25 = 250.99999999999997 -> 250.
@pytest.mark.parametrize("seconds, frames", [(1.0, 25), (0.01, 1), (0.0, 1), (2.999, 74), (10.04, 250)])
def test_frames_for_duration(seconds, frames):
    assert duration.frames_for_duration(seconds) == frames


def test_resolve_target_len_equals_upstream_preprocess_all():
    rng = random.Random(0)
    texts = [rng.choice(TEXTS[1:]) for _ in range(6)]
    prompts = [
        VoiceClonePrompt(torch.zeros(8, n, dtype=torch.long), ref, 0.1)
        for n, ref in [
            (60, "Reference words here."),
            (33, "你好世界。"),
            (75, "Hello, world."),
            (10, "x"),
            (120, "A longer one."),
            (48, "Ok."),
        ]
    ]
    speeds = [1.0, 0.8, 1.3, 1.0, 2.0, 0.5]
    durations = [None, 3.2, None, 0.01, 7.0, None]
    upstream = upstream_self(duration_estimator=ESTIMATOR, audio_tokenizer=None)
    upstream.audio_tokenizer = type("Codec", (), {"config": type("Config", (), {"frame_rate": 25})})()
    for with_prompts in (True, False):
        task = upstream._preprocess_all(
            text=texts, voice_clone_prompt=prompts if with_prompts else None, speed=speeds, duration=durations
        )
        for i in range(len(texts)):
            ref_text = prompts[i].ref_text if with_prompts else None
            ref_frames = prompts[i].ref_audio_tokens.shape[-1] if with_prompts else None
            ours = duration.resolve_target_len(texts[i], ref_text, ref_frames, speed=speeds[i], duration=durations[i])
            assert ours == (task.target_lens[i], task.speed[i])
