"""What test_synthesis.py and test_inference.py both use: the fp32 build and reference clips."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import soundfile

from codes.export.generated_higgs import speech_like_signal

# The codec in fp32 as well (--include-higgs alone gives fp16), so reference codes can equal upstream's.
FP32_BUILD = ("cpu_fp32", "--include-higgs", "--higgs-precision", "fp32")
# The same with the recogniser (the tiny random Whisper) inside, and the recogniser alone, for --asr_dir.
ASR_BUILD = (*FP32_BUILD, "--include-asr", "--asr-model", "tiny-whisper")
ASR_ONLY = ("cpu_fp32", "--asr-only", "--asr-model", "tiny-whisper")
REF_TEXT = "This is what the reference clip says"


def reference_clip(sample_rate: int = 24000, seed: int = 0, peak: float = 0.08, channels: int = 1) -> np.ndarray:
    """Speech-like audio [samples, channels] with 0.43 s of silence before, 0.9 s between two
    phrases and 0.61 s after, and a length that is no whole number of 960-sample hops.
    A peak of 0.08 gives an RMS under 0.1, which upstream raises before encoding."""
    silence = lambda seconds: np.zeros(int(seconds * sample_rate), dtype=np.float32)  # noqa: E731
    tracks = []
    for channel in range(channels):
        first, second = (speech_like_signal(s, sample_rate, seed + 10 * channel + i) for i, s in enumerate((1.2, 0.9)))
        wav = np.concatenate([silence(0.43), first, silence(0.9), second, silence(0.61), np.zeros(123, np.float32)])
        tracks.append(wav * (peak / np.abs(wav).max()) * (1.0 - 0.3 * channel))
    return np.stack(tracks, axis=1).astype(np.float32)


def write_clip(path: Path, clip: np.ndarray, sample_rate: int, subtype: str = "FLOAT") -> Path:
    soundfile.write(path, clip, sample_rate, subtype=subtype)
    return path
