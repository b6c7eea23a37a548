"""Olive's model script: the loaders and export-time inputs of every graph, by name.

Olive imports this file by path and asks it for `load_<graph>` (called with the source
folder) and `<graph>_inputs` (called with its model handler); both come from the one
registry entry per graph in codes/export/submodels.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from codes.export.submodels import olive_entry_point  # noqa: E402


def __getattr__(name: str):
    return olive_entry_point(name)
