"""Loudness as publishers ask for it: each chapter measured and levelled on its own.

- measure: integrated loudness (ITU-R BS.1770, by pyloudnorm), true peak (4x oversampled, as BS.1770's
  annex does), sample peak, RMS, and the noise floor (the quietest half second's RMS), all in dB.
- level_to_loudness: a chapter to a target LUFS; the gain is lowered where the true peak would pass the
  ceiling (no limiter: the speech is never reshaped), and the report says so.
- ACX (Audible's submission rules): RMS between -23 and -18 dB, peak at most -3 dB, noise floor at most
  -60 dB, 0.5 to 1 s of room tone at the head and 1 to 5 s at the tail. level_for_acx aims RMS at -20 dB
  under a -3.5 dB peak; with_room_tone gives each chapter 0.75 s and 2 s (the silence between sentences is
  digital silence, far under -60 dB).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ACX_RMS = (-23.0, -18.0)
ACX_PEAK = -3.0
ACX_NOISE_FLOOR = -60.0
ACX_HEAD = (0.5, 1.0)
ACX_TAIL = (1.0, 5.0)
ACX_RMS_TARGET = -20.0
ACX_PEAK_TARGET = -3.5  # half a dB of room under ACX's ceiling for the encoder's overshoot
ROOM_TONE = (0.75, 2.0)  # seconds of head and tail the ACX chapters get
SILENT = 1e-4  # a sample under this (-80 dB) is silence, for the head and tail


def db(value: float) -> float:
    return 20 * math.log10(value) if value > 0 else -math.inf


@dataclass(frozen=True)
class Measure:
    seconds: float
    lufs: float
    true_peak: float
    peak: float
    rms: float
    noise_floor: float
    head: float  # seconds of silence before the first sound
    tail: float  # after the last

    def acx_failures(self) -> list[str]:
        """What this chapter fails of ACX's rules (empty: it passes)."""
        failed = []
        if not ACX_RMS[0] <= self.rms <= ACX_RMS[1]:
            failed.append("rms")
        if self.peak > ACX_PEAK:
            failed.append("peak")
        if self.noise_floor > ACX_NOISE_FLOOR:
            failed.append("noise floor")
        if not ACX_HEAD[0] <= self.head <= ACX_HEAD[1]:
            failed.append("head")
        if not ACX_TAIL[0] <= self.tail <= ACX_TAIL[1]:
            failed.append("tail")
        return failed


def true_peak(audio: np.ndarray) -> float:
    """The peak between samples too: the signal 4x oversampled (BS.1770-4 annex 2), in dBTP."""
    from scipy.signal import resample_poly

    if not len(audio):
        return -math.inf
    return db(float(np.max(np.abs(resample_poly(audio.astype(np.float64), 4, 1)))))


def measure(audio: np.ndarray, sample_rate: int) -> Measure:
    import pyloudnorm

    audio = np.asarray(audio, dtype=np.float64)
    seconds = len(audio) / sample_rate
    lufs = pyloudnorm.Meter(sample_rate).integrated_loudness(audio) if seconds >= 0.4 else -math.inf
    window = sample_rate // 2
    windows = [audio[i:i + window] for i in range(0, max(len(audio) - window + 1, 1), window)]
    floor = min((math.sqrt(float(np.mean(w * w))) for w in windows if len(w)), default=0.0)
    sound = np.flatnonzero(np.abs(audio) > SILENT)
    head = sound[0] / sample_rate if len(sound) else seconds
    tail = (len(audio) - 1 - sound[-1]) / sample_rate if len(sound) else seconds
    return Measure(seconds, float(lufs), true_peak(audio), db(float(np.max(np.abs(audio), initial=0.0))),
                   db(math.sqrt(float(np.mean(audio * audio))) if len(audio) else 0.0), db(floor), head, tail)


def level_to_loudness(audio: np.ndarray, sample_rate: int, target_lufs: float, ceiling: float = -1.0) -> float:
    """The gain (dB) that brings a chapter to target_lufs, lowered so its true peak stays under `ceiling`."""
    m = measure(audio, sample_rate)
    if not math.isfinite(m.lufs):
        return 0.0
    return min(target_lufs - m.lufs, ceiling - m.true_peak)


def level_for_acx(audio: np.ndarray, sample_rate: int) -> float:
    """The gain (dB) that brings a chapter's RMS to -20 dB, lowered so its peak stays at -3.5 dB."""
    m = measure(audio, sample_rate)
    if not math.isfinite(m.rms):
        return 0.0
    return min(ACX_RMS_TARGET - m.rms, ACX_PEAK_TARGET - max(m.peak, m.true_peak))


def apply_gain(audio: np.ndarray, gain_db: float) -> np.ndarray:
    return (np.asarray(audio, dtype=np.float32) * np.float32(10 ** (gain_db / 20))).astype(np.float32)


def with_room_tone(speech: np.ndarray, sample_rate: int, head: float = ROOM_TONE[0],
                   tail: float = ROOM_TONE[1]) -> tuple[np.ndarray, int]:
    """A chapter's speech (its first to its last sound) with `head` and `tail` seconds of silence around it,
    and how far its samples moved (the new place of sample 0 minus the old)."""
    sound = np.flatnonzero(np.abs(speech) > SILENT)
    first = int(sound[0]) if len(sound) else 0
    body = speech[first:sound[-1] + 1] if len(sound) else speech[:0]
    lead = round(head * sample_rate)
    return np.concatenate([np.zeros(lead, np.float32), body.astype(np.float32),
                           np.zeros(round(tail * sample_rate), np.float32)]), lead - first


def report_table(rows: list[tuple[str, Measure, float]], acx: bool) -> str:
    """A table a publisher reads: one row a chapter (title, measure, gain applied), pass or fail under ACX."""
    head = "| chapter | length | LUFS | true peak | RMS | peak | noise floor | head | tail | gain |" + (" ACX |" if acx else "")
    lines = [head, "|" + "---|" * (head.count("|") - 1)]

    def f(value: float) -> str:
        return "-inf" if value == -math.inf else f"{value:.1f}"

    for title, m, gain in rows:
        verdict = ""
        if acx:
            failed = m.acx_failures()
            verdict = " pass |" if not failed else f" FAIL: {', '.join(failed)} |"
        lines.append(f"| {title} | {m.seconds:.1f} s | {f(m.lufs)} | {f(m.true_peak)} dBTP | {f(m.rms)} dB | "
                     f"{f(m.peak)} dB | {f(m.noise_floor)} dB | {m.head:.2f} s | {m.tail:.2f} s | {gain:+.1f} dB |" + verdict)
    return "\n".join(lines)
