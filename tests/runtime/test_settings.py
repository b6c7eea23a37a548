"""GenerationSettings: upstream's defaults, and bad values refused where they enter."""

from __future__ import annotations

import dataclasses

import pytest

from omnivoice.models.omnivoice import OmniVoiceGenerationConfig

from codes.common.errors import UserError
from codes.runtime.contract.settings import ALIASES, GenerationSettings


def test_defaults_equal_upstream_generation_config():
    upstream = {ALIASES.get(name, name): value for name, value in dataclasses.asdict(OmniVoiceGenerationConfig()).items()}
    assert GenerationSettings().to_dict() == upstream


@pytest.mark.parametrize(
    "name, value",
    [
        ("num_steps", 0),
        ("num_steps", 2.5),
        ("num_steps", True),
        ("t_shift", 0.0),
        ("guidance_scale", float("nan")),
        ("position_temperature", -1.0),
        ("class_temperature", -0.1),
        ("audio_chunk_duration", 0),
        ("pad_duration", -0.1),
        ("fade_duration", float("inf")),
        ("denoise", 1),
        ("layer_penalty_factor", "5"),
    ],
)
def test_bad_values_raise_one_line_user_error_naming_the_setting(name, value):
    with pytest.raises(UserError, match=name) as info:
        GenerationSettings(**{name: value})
    assert "\n" not in str(info.value)


def test_replace_validates_and_rejects_unknown_names():
    settings = GenerationSettings().replace(num_step=8, class_temperature=0.5)
    assert (settings.num_steps, settings.class_temperature) == (8, 0.5)
    with pytest.raises(UserError, match="num_step"):
        settings.replace(num_step=-1)
    with pytest.raises(UserError, match="steps"):
        settings.replace(steps=8)
    assert GenerationSettings.from_dict(settings.to_dict()) == settings


def test_the_flags_take_upstreams_names_and_switches():
    import argparse

    from codes.runtime.contract.settings import add_generation_flags, settings_from_flags

    parser = argparse.ArgumentParser()
    add_generation_flags(parser)
    settings = settings_from_flags(parser.parse_args(
        ["--num_step", "8", "--denoise", "false", "--preprocess_prompt", "no", "--postprocess_output", "0",
         "--audio_chunk_duration", "10", "--audio_chunk_threshold", "20"]))
    assert (settings.num_steps, settings.denoise, settings.preprocess_prompt, settings.postprocess_output,
            settings.audio_chunk_duration, settings.audio_chunk_threshold) == (8, False, False, False, 10.0, 20.0)
    assert settings_from_flags(parser.parse_args([])) == GenerationSettings()
    assert settings_from_flags(parser.parse_args(["--no_denoise"])).denoise is False
    with pytest.raises(UserError, match="--denoise true and --no_denoise contradict each other"):
        settings_from_flags(parser.parse_args(["--no_denoise", "--denoise", "yes"]))
    with pytest.raises(SystemExit):
        parser.parse_args(["--denoise", "maybe"])
