"""The synthesis maths and text side import neither torch nor the upstream package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
RUNTIME_MODULES = [
    "codes.runtime.text",
    "codes.runtime.voice_design",
    "codes.runtime.duration",
    "codes.runtime.settings",
    "codes.runtime.prompt",
    "codes.runtime.decoding",
    "codes.runtime.audio",
]
FORBIDDEN = ["torch", "torchaudio", "transformers", "omnivoice", "pydub", "librosa"]


def test_runtime_modules_import_without_torch():
    script = (
        "import sys\n"
        f"for name in {RUNTIME_MODULES!r}: __import__(name)\n"
        "import codes.runtime.audio as audio, numpy as np\n"
        "audio.remove_silence(np.zeros(2400, np.float32), 24000)\n"
        f"print(sorted(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
