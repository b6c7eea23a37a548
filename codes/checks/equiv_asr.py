"""The recogniser against transformers' ASR pipeline on the checkpoint it was built from (build-time: needs torch).

Upstream transcribes with `pipeline("automatic-speech-recognition", model=<Whisper>)` and strips the
text; both sides get the same speech-like clips at the rates a reference arrives in, and their texts
are compared character for character.
"""

from __future__ import annotations

from pathlib import Path

from codes.checks.report import Row
from codes.common.errors import UserError
from codes.export.generated_higgs import speech_like_signal
from codes.runtime.recognition.asr import Recogniser, read_asr_manifest

# (seconds, sample rate, seed): a short and a long clip at the codec's rate, one at a file's.
CLIPS = ((3.0, 24000, 1), (10.0, 24000, 2), (8.0, 44100, 5))


def whisper_source(folder: Path, source: str | None = None) -> Path:
    """--asr_source, else the Whisper checkpoint the recogniser's manifest names (a generated one is made
    again, a hub id looked up in the local cache)."""
    from codes.export.asr_build import resolve_whisper
    from codes.export.whisper_checkpoint import GENERATED

    if source:
        return resolve_whisper(source)
    recorded = read_asr_manifest(folder)["source"]
    model, path = recorded.get("asr_model"), recorded.get("path")
    if model in GENERATED:
        return resolve_whisper(model)
    if path and Path(path).is_dir():
        return Path(path)
    try:
        return resolve_whisper(model)
    except UserError:
        raise UserError(f"the Whisper checkpoint the recogniser in {folder} came from ({path or model}) is not here; "
                        "pass it with --asr_source DIR") from None


def recogniser_equivalence(folder: Path, source: Path, provider: str = "cpu") -> list[Row]:
    """Rows comparing the recogniser in `folder` with the pipeline on `source`: fp32 texts must be equal,
    fp16 and int8 ones are reported."""
    import torch
    from transformers import pipeline

    pipe = pipeline("automatic-speech-recognition", model=str(source), dtype=torch.float32, device="cpu")
    recogniser = Recogniser(folder, provider=provider)
    precision = recogniser.manifest["precision"]
    rows = []
    for seconds, rate, seed in CLIPS:
        wav = speech_like_signal(seconds, rate, seed)
        ours = recogniser.transcribe(wav, rate)
        theirs = pipe({"array": wav, "sampling_rate": rate})["text"].strip()
        note = (f"same text, {len(theirs)} characters" if ours == theirs
                else f"ours {ours[:40]!r}, the pipeline's {theirs[:40]!r}")
        row = Row(f"recogniser text {seconds:g} s at {rate} Hz", precision, note=note)
        if precision == "fp32":
            row.bound, row.passed = "text equal", ours == theirs
        rows.append(row)
    return rows
