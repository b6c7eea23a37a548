"""codes.runtime.text.voice_design against upstream's `_resolve_language` / `_resolve_instruct`."""

from __future__ import annotations

import logging
import re

import pytest
from helpers.upstream_twins import extraction_tool

from omnivoice.models.omnivoice import _resolve_instruct, _resolve_language
from omnivoice.utils import lang_map, voice_design as upstream_vd

from codes.common.errors import UserError
from codes.runtime.data import load_table
from codes.runtime.text import voice_design


def test_language_and_instruct_json_equal_upstream_tables():
    tool = extraction_tool()
    assert load_table("languages") == tool.language_table()
    assert load_table("instruct") == tool.instruct_table()
    assert voice_design.LANGUAGE_NAME_TO_ID == lang_map.LANG_NAME_TO_ID
    assert voice_design.LANGUAGE_IDS == lang_map.LANG_IDS
    assert voice_design.INSTRUCT_VALID == upstream_vd._INSTRUCT_ALL_VALID
    assert voice_design.INSTRUCT_EN_TO_ZH == upstream_vd._INSTRUCT_EN_TO_ZH
    assert list(voice_design.INSTRUCT_EXCLUSIVE_GROUPS) == upstream_vd._INSTRUCT_MUTUALLY_EXCLUSIVE


@pytest.mark.parametrize(
    "language",
    [None, "None", "none", "en", "zh", "ja", "English", "english", "CHINESE", "Zulu", "yue", "de", "Deutsch"],
)
def test_resolve_language_equals_upstream(language):
    assert voice_design.resolve_language(language) == _resolve_language(language)


def test_unknown_language_warns_and_falls_back_to_none(caplog):
    with caplog.at_level(logging.WARNING, logger="codes.runtime.text.voice_design"):
        assert voice_design.resolve_language("Klingon") is None
    assert "Klingon" in caplog.text


VALID_INSTRUCTS = [
    None,
    "",
    "   ",
    "male",
    "Female, Low Pitch",
    "female，low pitch",
    "male, british accent",
    ",male, child,",
    "男，河南话",
    "女, 老年",
    "young adult, very high pitch, whisper",
    "中年，男，极低音调，耳语",
    "male, 四川话",
    "female, elderly, indian accent",
    "老年, american accent",
]


@pytest.mark.parametrize("instruct", VALID_INSTRUCTS)
@pytest.mark.parametrize("use_zh", [False, True])
def test_resolve_instruct_equals_upstream(instruct, use_zh):
    assert voice_design.resolve_instruct(instruct, use_zh=use_zh) == _resolve_instruct(instruct, use_zh=use_zh)


def _upstream_error(instruct) -> str:
    with pytest.raises(ValueError) as info:
        _resolve_instruct(instruct)
    return str(info.value)


@pytest.mark.parametrize("instruct", ["mail, low pich", "femal", "robot voice", "男，河南", "male, britsh accent, xyz"])
def test_unknown_instruct_items_raise_one_line_user_error_with_upstream_suggestions(instruct):
    with pytest.raises(UserError) as info:
        voice_design.resolve_instruct(instruct)
    message = str(info.value)
    assert "\n" not in message
    upstream_hints = re.findall(r"'([^']*)' -> '([^']*)' \((unsupported[^)]*)\)", _upstream_error(instruct))
    assert upstream_hints
    for raw, item, hint in upstream_hints:
        assert f"'{raw}' -> '{item}' ({hint})" in message


@pytest.mark.parametrize(
    "instruct", ["male, female", "child, elderly, low pitch, high pitch", "男, male", "british accent, american accent"]
)
def test_conflicting_items_raise_user_error_where_upstream_raises(instruct):
    upstream = _upstream_error(instruct)
    with pytest.raises(UserError) as info:
        voice_design.resolve_instruct(instruct)
    for pair in re.findall(r"'[^']*' vs '[^']*'", upstream):
        assert pair in str(info.value)


def test_dialect_with_accent_is_rejected_like_upstream():
    assert "Cannot mix" in _upstream_error("河南话, british accent")
    with pytest.raises(UserError, match="dialect"):
        voice_design.resolve_instruct("河南话, british accent")


def test_suggestion_is_independent_of_set_order():
    assert voice_design.suggest_instruct_item("mael") == "male"
    assert voice_design.suggest_instruct_item("zzzz") is None
