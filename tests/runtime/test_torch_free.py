"""The synthesis maths and text side import neither torch nor the upstream package."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from helpers.venvs import runtime_venv

REPO_ROOT = Path(__file__).resolve().parents[2]
RUNTIME_MODULES = [
    "codes.runtime.text.cleanup",
    "codes.runtime.text.voice_design",
    "codes.runtime.text.duration",
    "codes.runtime.contract.settings",
    "codes.runtime.voices.prompt",
    "codes.runtime.model.decoding",
    "codes.runtime.audio.processing",
    "codes.runtime.voices.prompt_file",
    "codes.runtime.text.normalize",
    "codes.runtime.api",
    "codes.runtime.script",
    "codes.runtime.book",
    "codes.runtime.recognition.asr",
    "codes.runtime.recognition.alignment",
]
FORBIDDEN = ["torch", "torchaudio", "transformers", "omnivoice", "pydub", "librosa"]


def test_runtime_modules_import_without_torch():
    script = (
        "import sys\n"
        f"for name in {RUNTIME_MODULES!r}: __import__(name)\n"
        "import codes.runtime.audio.processing as audio, numpy as np\n"
        "audio.remove_silence(np.zeros(2400, np.float32), 24000)\n"
        f"print(sorted(m for m in {FORBIDDEN!r} if m in sys.modules))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_runtime_runs_in_a_venv_with_only_the_runtime_requirements(builds, tmp_path):
    """inference.py and higgs_inference.py need requirements-runtime.txt alone: no torch anywhere, even to
    read a voice upstream saved with torch."""
    import torch
    from omnivoice.models.omnivoice import VoiceClonePrompt
    from helpers.synthesis_inputs import FP32_BUILD

    upstream_voice = tmp_path / "upstream.pt"
    VoiceClonePrompt(torch.randint(0, 1024, (8, 30)), "What the clip says.", 0.05).save(str(upstream_voice))

    model_dir = builds.get(*FP32_BUILD)
    python = runtime_venv() / "bin" / "python"
    missing = subprocess.run([str(python), "-c", f"import importlib.util as u; print([m for m in {FORBIDDEN!r} if u.find_spec(m)])"],
                             capture_output=True, text=True, check=True)
    assert missing.stdout.strip() == "[]"
    imported = subprocess.run([str(python), "-c", "import codes.runtime.synthesis, codes.runtime.audio.codec"],
                              cwd=REPO_ROOT, capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr
    spoken = subprocess.run([str(python), str(REPO_ROOT / "inference.py"), "--model_dir", str(model_dir), "--text",
                             "Hello.", "--num_steps", "4", "--quiet", "--voice", str(upstream_voice), "--output",
                             str(tmp_path / "out.wav")],
                            capture_output=True, text=True, timeout=300)
    assert spoken.returncode == 0, spoken.stderr
    (tmp_path / "dialogue.txt").write_text('Alice: Hi. <break time="200ms"/>\nBob: Hello.\n', encoding="utf-8")
    scripted = subprocess.run([str(python), str(REPO_ROOT / "inference.py"), "--model_dir", str(model_dir), "--script",
                               str(tmp_path / "dialogue.txt"), "--speaker", f"Alice={upstream_voice}", "--speaker",
                               "Bob=auto", "--num_steps", "4", "--quiet", "--output", str(tmp_path / "dialogue.wav"),
                               "--captions", str(tmp_path / "dialogue.vtt")], capture_output=True, text=True, timeout=300)
    assert scripted.returncode == 0, scripted.stderr
    assert (tmp_path / "dialogue.vtt").read_text().count("-->") == 2
    (tmp_path / "book.md").write_text("# One\n\nThe first chapter.\n\n# Two\n\nThe second “one”.\n", encoding="utf-8")
    booked = subprocess.run([str(python), str(REPO_ROOT / "inference.py"), "--model_dir", str(model_dir), "--script",
                             str(tmp_path / "book.md"), "--num_steps", "4", "--quiet", "--output", str(tmp_path / "book.m4b"),
                             "--chapters", str(tmp_path / "chapters"), "--read_along", str(tmp_path / "read-along.epub"),
                             "--acx"], capture_output=True, text=True, timeout=300)
    assert booked.returncode == 0, booked.stderr
    assert len(list((tmp_path / "chapters").glob("*.mp3"))) == 2 and (tmp_path / "read-along.epub").is_file()
    round_trip = subprocess.run([str(python), str(REPO_ROOT / "higgs_inference.py"), "--models-dir",
                                 str(model_dir / "audio_tokenizer"), "--input", str(tmp_path / "out.wav"),
                                 "--output", str(tmp_path / "rt.wav")], capture_output=True, text=True, timeout=300)
    assert round_trip.returncode == 0, round_trip.stderr
    assert (tmp_path / "rt.wav").stat().st_size > 1000
