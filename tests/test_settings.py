"""GenerationSettings: upstream's defaults, and bad values refused where they enter."""

from __future__ import annotations

import dataclasses

import pytest

from omnivoice.models.omnivoice import OmniVoiceGenerationConfig

from codes.common.errors import UserError
from codes.runtime.settings import ALIASES, GenerationSettings


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
