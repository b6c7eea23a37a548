"""Write upstream omnivoice's data tables to codes/runtime/data/*.json.

Run with the build environment (it imports omnivoice, hence torch):

    python tools/extract_upstream_tables.py [--out codes/runtime/data]

The runtime reads only the JSON; tests/runtime/test_*.py assert the JSON still equals
what the installed omnivoice holds, so re-run this after upgrading omnivoice.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# Upstream keeps its instruct categories in this order without naming them;
# the names appear in its conflict message ("gender, age, pitch, style, accent, dialect").
INSTRUCT_CATEGORY_NAMES = ("gender", "age", "pitch", "style", "accent", "dialect")
# Ours, for a page to show the vocabulary (upstream has none): each category's label, the English names of the
# dialects (whose items are Chinese), and the categories one choice excludes (upstream refuses an accent with a
# dialect: accents are for English speech, dialects for Chinese).
INSTRUCT_LABELS = {"gender": "Gender", "age": "Age", "pitch": "Pitch", "style": "Style", "accent": "Accent",
                   "dialect": "Chinese dialect"}
DIALECT_LABELS = {"东北话": "Northeastern", "云南话": "Yunnan", "四川话": "Sichuan", "宁夏话": "Ningxia", "桂林话": "Guilin",
                  "河南话": "Henan", "济南话": "Jinan", "甘肃话": "Gansu", "石家庄话": "Shijiazhuang", "贵州话": "Guizhou",
                  "陕西话": "Shaanxi", "青岛话": "Qingdao"}
EXCLUDES = {"accent": ["dialect"], "dialect": ["accent"]}


def language_table() -> dict:
    from omnivoice.utils import lang_map

    return {
        "_source": "omnivoice/utils/lang_map.py LANG_NAME_TO_ID",
        "name_to_id": dict(sorted(lang_map.LANG_NAME_TO_ID.items())),
    }


def instruct_table() -> dict:
    from omnivoice.utils import voice_design

    categories = []
    for name, category in zip(INSTRUCT_CATEGORY_NAMES, voice_design._INSTRUCT_CATEGORIES, strict=True):
        shown = {"label": INSTRUCT_LABELS[name], **({"excludes": EXCLUDES[name]} if name in EXCLUDES else {})}
        if isinstance(category, dict):
            categories.append({"name": name, **shown, "en_to_zh": dict(category)})
        else:
            items = sorted(category)
            labels = {item: DIALECT_LABELS[item] for item in items if item in DIALECT_LABELS}
            categories.append({"name": name, **shown, "items": items, **({"item_labels": labels} if labels else {})})
    return {"_source": "omnivoice/utils/voice_design.py _INSTRUCT_CATEGORIES; labels and excludes are ours",
            "categories": categories}


def duration_table() -> dict:
    from omnivoice.utils.duration import RuleDurationEstimator

    estimator = RuleDurationEstimator()
    return {
        "_source": "omnivoice/utils/duration.py RuleDurationEstimator",
        "weights": dict(estimator.weights),
        "ranges": [[end, script] for end, script in estimator.ranges],
    }


def text_table() -> dict:
    from omnivoice.models.omnivoice import _NONVERBAL_PATTERN
    from omnivoice.utils import text

    # The tag list lives only inside upstream's regex: r"\[(tag|tag|...)\]".
    inner = re.fullmatch(r"\\\[\((.*)\)\\\]", _NONVERBAL_PATTERN.pattern)
    if inner is None:
        sys.exit(f"upstream's non-verbal tag pattern changed shape: {_NONVERBAL_PATTERN.pattern!r}")
    return {
        "_source": "omnivoice/utils/text.py and omnivoice/models/omnivoice.py _NONVERBAL_PATTERN",
        "split_punctuation": sorted(text.SPLIT_PUNCTUATION),
        "closing_marks": sorted(text.CLOSING_MARKS),
        "end_punctuation": sorted(text.END_PUNCTUATION),
        "abbreviations": sorted(text.ABBREVIATIONS),
        "nonverbal_tags": inner.group(1).split("|"),
    }


TABLES = {
    "languages": language_table,
    "instruct": instruct_table,
    "duration_weights": duration_table,
    "text_rules": text_table,
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "codes" / "runtime" / "data")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, build in TABLES.items():
        path = args.out / f"{name}.json"
        path.write_text(json.dumps(build(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
