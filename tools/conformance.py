"""Write the conformance vectors, tests/conformance/<stage>.json, from the Python runtime (docs/runtime.md).

    python tools/conformance.py

Deterministic: the same runtime writes the same bytes. tests/conformance/test_conformance.py checks the runtime
against the files; run this after a change the vectors should follow, and read the diff before committing it.
"""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from codes.checks.conformance import write_vectors  # noqa: E402

if __name__ == "__main__":
    for path in write_vectors(REPO / "tests" / "conformance"):
        print(f"{path.relative_to(REPO)}: {path.stat().st_size:,} bytes")
