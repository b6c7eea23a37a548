"""Language and voice-design instruct resolution, as upstream's generate() does it.

Languages: an id ("en") or a name ("English", any case); unknown ones log a
warning and fall back to language-agnostic mode (None), like upstream.
Instructs: a controlled vocabulary (gender, age, pitch, style, English accents,
Chinese dialects) from codes/runtime/data/instruct.json; unknown items and conflicting
items raise UserError with a one-line message.
"""

from __future__ import annotations

import difflib
import logging
import re

from codes.common.errors import UserError
from codes.runtime.data import load_table
from codes.runtime.text.cleanup import contains_chinese

logger = logging.getLogger(__name__)

LANGUAGE_NAME_TO_ID: dict[str, str] = load_table("languages")["name_to_id"]
LANGUAGE_IDS = frozenset(LANGUAGE_NAME_TO_ID.values())
LANGUAGE_NAMES = frozenset(LANGUAGE_NAME_TO_ID)


def _instruct_vocabulary():
    en_to_zh: dict[str, str] = {}
    exclusive_groups: list[frozenset[str]] = []
    for category in load_table("instruct")["categories"]:
        if "en_to_zh" in category:
            en_to_zh.update(category["en_to_zh"])
            exclusive_groups.append(frozenset(category["en_to_zh"]) | frozenset(category["en_to_zh"].values()))
        else:
            exclusive_groups.append(frozenset(category["items"]))
    zh_to_en = {zh: en for en, zh in en_to_zh.items()}
    valid = frozenset().union(*exclusive_groups)
    return en_to_zh, zh_to_en, tuple(exclusive_groups), valid


INSTRUCT_EN_TO_ZH, INSTRUCT_ZH_TO_EN, INSTRUCT_EXCLUSIVE_GROUPS, INSTRUCT_VALID = _instruct_vocabulary()
INSTRUCT_VALID_EN = frozenset(item for item in INSTRUCT_VALID if not contains_chinese(item))
INSTRUCT_VALID_ZH = INSTRUCT_VALID - INSTRUCT_VALID_EN
# Sorted so difflib's suggestion never depends on set iteration order.
_SUGGESTION_POOL = sorted(INSTRUCT_VALID)


# English names of the Chinese dialects, for pages that list them (the instruct itself is the Chinese item).
def design_vocabulary() -> list[dict]:
    """Upstream's voice-design vocabulary by category, for a page to build its controls from: each category's
    `name`, `label` and the categories it `excludes`; each item's `value` (what an instruct says), its Chinese form
    `zh` where it has one, and for a dialect its English `label`. The items of one category exclude each other. How chosen items join into an
    instruct is resolve_instruct's (the server's POST /v1/audio/voice-design), never the page's."""
    categories = []
    for category in load_table("instruct")["categories"]:
        labels, chinese = category.get("item_labels", {}), category.get("en_to_zh", {})
        values = category["en_to_zh"] if "en_to_zh" in category else category["items"]
        items = [{"value": item, **({"zh": chinese[item]} if item in chinese else {}),
                  **({"label": labels[item]} if item in labels else {})} for item in values]
        categories.append({"name": category["name"], "label": category["label"],
                           "excludes": category.get("excludes", []), "items": items})
    return categories


# Upstream's lang_display_name: str.title() but for these (apostrophes, "de", "del").
_TITLE_EXCEPTIONS = {
    "fe'fe'": "Fe'fe'",
    "dũya": "Dũya",
    "santiago del estero quichua": "Santiago del Estero Quichua",
    "santa ana de tusi pasco quechua": "Santa Ana de Tusi Pasco Quechua",
    "malinaltepec me'phaa": "Malinaltepec Me'phaa",
    "tlacoapa me'phaa": "Tlacoapa Me'phaa",
}


def language_choices() -> list[dict]:
    """Every language as {"id", "name"}, named and sorted as upstream's demo lists them."""
    named = [{"id": code, "name": _TITLE_EXCEPTIONS.get(name, name.title())} for name, code in LANGUAGE_NAME_TO_ID.items()]
    return sorted(named, key=lambda language: language["name"])


def resolve_language(language: str | None) -> str | None:
    """A language id for the prompt, or None for language-agnostic mode."""
    if language is None or language.lower() == "none":
        return None
    if language in LANGUAGE_IDS:
        return language
    if language.lower() in LANGUAGE_NAME_TO_ID:
        return LANGUAGE_NAME_TO_ID[language.lower()]
    logger.warning(
        "Language %r is not recognized (use an id such as 'en', 'zh', 'ja' or a name such as "
        "'English'); falling back to language-agnostic mode.",
        language,
    )
    return None


def suggest_instruct_item(item: str) -> str | None:
    """The closest valid instruct item (difflib ratio >= 0.6), or None."""
    matches = difflib.get_close_matches(item, _SUGGESTION_POOL, n=1, cutoff=0.6)
    return matches[0] if matches else None


def _unsupported_items_message(instruct: str, unknown: list[tuple[str, str]]) -> str:
    problems = []
    for raw, item in unknown:
        suggestion = suggest_instruct_item(item)
        hint = f"unsupported; did you mean '{suggestion}'?" if suggestion else "unsupported"
        problems.append(f"'{raw}' -> '{item}' ({hint})")
    return (
        f"unsupported instruct items in {instruct!r}: {'; '.join(problems)}. "
        f"Valid English items: {', '.join(sorted(INSTRUCT_VALID_EN))}. "
        f"Valid Chinese items: {'，'.join(sorted(INSTRUCT_VALID_ZH))}. "
        "Use only English items separated by comma + space (e.g. 'male, indian accent') "
        "or only Chinese items separated by a full-width comma (e.g. '男，河南话')."
    )


def resolve_instruct(instruct: str | None, use_zh: bool = False) -> str | None:
    """Validate a voice-design instruct and write it in one language with its separator.

    Items may be separated by "," or "，" and are matched case-insensitively.
    A dialect forces Chinese, an accent forces English; otherwise `use_zh`
    (the target text contains Chinese) decides. Returns None for an empty instruct.
    """
    if instruct is None or not instruct.strip():
        return None
    instruct = instruct.strip()
    raw_items = [raw for raw in re.split(r"\s*[,，]\s*", instruct) if raw]

    items, unknown = [], []
    for raw in raw_items:
        item = raw.strip().lower()
        if item in INSTRUCT_VALID:
            items.append(item)
        else:
            unknown.append((raw, item))
    if unknown:
        raise UserError(_unsupported_items_message(instruct, unknown))

    has_dialect = any(item.endswith("话") for item in items)
    has_accent = any(" accent" in item for item in items)
    if has_dialect and has_accent:
        raise UserError(
            f"instruct {instruct!r} mixes a Chinese dialect with an English accent: "
            "dialects are for Chinese speech, accents for English speech; keep one"
        )
    if has_dialect or has_accent:
        use_zh = has_dialect

    translation = INSTRUCT_EN_TO_ZH if use_zh else INSTRUCT_ZH_TO_EN
    items = [translation.get(item, item) for item in items]

    conflicts = [[item for item in items if item in group] for group in INSTRUCT_EXCLUSIVE_GROUPS]
    conflicts = [hits for hits in conflicts if len(hits) > 1]
    if conflicts:
        described = "; ".join(" vs ".join(f"'{hit}'" for hit in hits) for hits in conflicts)
        raise UserError(
            f"conflicting instruct items within the same category: {described}; each category "
            "(gender, age, pitch, style, accent, dialect) allows at most one item"
        )

    separator = "，" if any(contains_chinese(item) for item in items) else ", "
    return separator.join(items)
