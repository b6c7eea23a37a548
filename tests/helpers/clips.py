"""Reference clips for the audio tests (the hostile ones, shared with bench/soak.py, are in
codes/checks/hostile_clips.py)."""

from __future__ import annotations

import io

import numpy as np
import soundfile


def channels_wav(frames: int, channels: int, rate: int = 24000, seed: int = 0) -> tuple[bytes, np.ndarray]:
    """A float WAV of independent noise per channel, and its samples [frames, channels]."""
    samples = np.random.default_rng(seed).uniform(-0.5, 0.5, (frames, channels)).astype(np.float32)
    buffer = io.BytesIO()
    soundfile.write(buffer, samples, rate, format="WAV", subtype="FLOAT")
    return buffer.getvalue(), samples
