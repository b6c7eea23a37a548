"""The callable class each Ray actor runs: one OmniVoiceOnnx, loaded once, speaking batch after batch.

Each row is synthesized alone, with its own RandomNoise(seed), so its audio never depends on what
shares its batch and equals `inference.py --seed` for the same inputs. One synthesize() call over
the batch, with a noise source per row, gives the same audio on an fp32 build, but a dynamic-int8
build quantizes activations with one scale over the whole batch (tiny cpu_int8, 8 rows: 43-61% of
each row's codes matched its solo codes), and on this CPU it was no faster (tiny fp32, 8 rows at
32 steps: 1.32 s batched, 1.15 s alone). A row that fails is an error record.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections import OrderedDict
from pathlib import Path

import pyarrow as pa

from codes.common.errors import UserError
from codes.common.fileio import atomic_path, sha256_file
from codes.corpus.ledger import CRASHED, RESULT_SCHEMA, SPEAKING, STATE_DIR, WRITTEN, is_file_written, record
from codes.runtime.audio.outputs import encode_audio
from codes.runtime.contract.settings import GenerationSettings
from codes.runtime.model.decoding import RandomNoise

# What the driver hands an actor: one row a line.
WORK_SCHEMA = pa.schema([
    ("id", pa.string()),
    ("row", pa.string()),
    ("audio_path", pa.string()),
    ("request", pa.string()),
    ("fingerprint", pa.string()),
])
VOICES_KEPT = 64  # loaded voices an actor keeps: rows often share a speaker


class _Warnings(logging.Handler):
    """The runtime's warnings for the row being spoken (an unknown language, say), kept for its record."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, entry: logging.LogRecord) -> None:
        self.messages.append(entry.getMessage())


def _published(receipt: Path, final: Path, item: dict) -> dict | None:
    """The record of this very request's file if an actor already published it (None otherwise)."""
    try:
        written = json.loads(receipt.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(written, dict) or written.get("fingerprint") != item["fingerprint"]:
        return None
    written = record(**{key: written.get(key) for key in RESULT_SCHEMA.names})
    return {**written, "row": item["row"]} if is_file_written(final, written) else None


class Synthesizer:
    def __init__(self, model_dir: str, higgs_dir: str | None, provider: str | None, threads: int,
                 settings: dict, out_dir: str, normalize_text: bool = False, asr_dir: str | None = None):
        from codes.runtime.synthesis import OmniVoiceOnnx

        self.tts = OmniVoiceOnnx(model_dir, higgs_dir=higgs_dir, provider=provider, threads=threads, asr_dir=asr_dir)
        self.tts.codec.load_decoder()
        self.settings = GenerationSettings.from_dict(settings)
        self.normalize_text = normalize_text
        self.out_dir = Path(out_dir)
        self.actor = f"{socket.gethostname()}:{os.getpid()}"
        self.voices: OrderedDict[tuple, object] = OrderedDict()
        self.warnings = _Warnings()
        logging.getLogger("codes").addHandler(self.warnings)

    def __call__(self, batch: pa.Table) -> pa.Table:
        return pa.Table.from_pylist([self.speak(item) for item in batch.to_pylist()], schema=RESULT_SCHEMA)

    def speak(self, item: dict) -> dict:
        request = json.loads(item["request"])
        done = dict(id=item["id"], row=item["row"], audio_path=item["audio_path"], actor=self.actor,
                    seed=request["seed"], fingerprint=item["fingerprint"])
        final = self.out_dir / item["audio_path"]
        receipt = self.out_dir / STATE_DIR / WRITTEN / f"{final.name}.json"
        marker = self.out_dir / STATE_DIR / SPEAKING / final.name
        # Ray retries a batch whose actor died: the rows that actor published are done, and the row it was
        # speaking is the one that took it down.
        earlier = _published(receipt, final, item)
        if earlier is not None:
            return earlier
        try:
            with open(marker, "x", encoding="utf-8") as f:
                f.write(self.actor)
        except FileExistsError:
            dead = marker.read_text(encoding="utf-8", errors="replace").strip() or "unknown"
            marker.unlink(missing_ok=True)  # the crash is in this record now
            return record(**done, status="error", error=f"{CRASHED}, actor {dead}; later runs skip it, "
                                                        "run again with --retry-failed to try it anyway")
        self.warnings.messages.clear()
        start = time.perf_counter()
        try:
            settled = self.tts.settle(request["text"], request["language"], request["instruct"], self.voice(request),
                                      request["duration"], request["speed"], normalize_text=self.normalize_text)
            audios, _ = self.tts.synthesize(settled, self.settings, RandomNoise(request["seed"]))
            return self.publish(final, receipt, audios[0], done, start)
        except UserError as exc:
            message = str(exc)
        except Exception as exc:  # a row must never stop the run; its record says what happened
            first_line = next((line for line in str(exc).splitlines() if line.strip()), "")
            message = f"{type(exc).__name__}: {first_line}" if first_line else type(exc).__name__
        finally:
            marker.unlink(missing_ok=True)
        return record(**done, status="error", error=message, warning=self._warned(),
                      synthesis_seconds=time.perf_counter() - start)

    def publish(self, final: Path, receipt: Path, audio, done: dict, start: float) -> dict:
        """Write the audio under a hidden name, its record beside the ledger, then link it to its final name,
        which fails if a file appeared there since the run planned: that file is kept, whoever made it."""
        try:
            with atomic_path(final, exclusive=True) as tmp:
                encode_audio(tmp, audio, self.tts.sample_rate)
                written = record(**done, status="ok", warning=self._warned(),
                                 audio_seconds=len(audio) / self.tts.sample_rate,
                                 synthesis_seconds=time.perf_counter() - start,
                                 audio_bytes=tmp.stat().st_size, audio_sha256=sha256_file(tmp))
                with atomic_path(receipt) as tmp_receipt:
                    tmp_receipt.write_text(json.dumps(written, ensure_ascii=False), encoding="utf-8")
        except FileExistsError:
            receipt.unlink(missing_ok=True)
            return record(**done, status="error", warning=self._warned(),
                          synthesis_seconds=time.perf_counter() - start,
                          error=f"{final} appeared while this run was speaking the row and was kept; "
                                "move it away and run again to speak it")
        return written

    def _warned(self) -> str | None:
        return "; ".join(dict.fromkeys(self.warnings.messages)) or None

    def voice(self, request: dict):
        """The row's saved voice or reference clip (transcribed where it came without its text), loaded once per actor."""
        if request["voice"]:
            key = ("voice", request["voice"])
        elif request["ref_audio"]:
            key = ("ref", request["ref_audio"], request["ref_text"])
        else:
            return None
        if key in self.voices:
            self.voices.move_to_end(key)
            return self.voices[key]
        from codes.runtime.request import Voice

        if key[0] == "voice":
            voice = Voice.load(request["voice"])
        else:
            voice = self.tts.create_voice(request["ref_audio"], request["ref_text"], self.settings.preprocess_prompt)
        self.voices[key] = voice
        if len(self.voices) > VOICES_KEPT:
            self.voices.popitem(last=False)
        return voice
