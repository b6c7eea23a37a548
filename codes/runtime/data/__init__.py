"""Data tables carried over from upstream omnivoice (written by tools/extract_upstream_tables.py)."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent


@cache
def load_table(name: str) -> dict:
    """The parsed `codes/runtime/data/<name>.json`; cached, so treat it as read-only."""
    with open(DATA_DIR / f"{name}.json", encoding="utf-8") as f:
        return json.load(f)
