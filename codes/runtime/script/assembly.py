"""A track assembled from its pieces as they come, the same for every driver of a plan (the runtime's engine,
Ray's actors, the server's stream): kept ones first, then each one spoken placed on the timeline, kept for a
re-run, counted and reported."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from codes.runtime.script.pieces import StoredPiece
from codes.runtime.script.plan import ScriptRun
from codes.runtime.script.timeline import RenderedScript, Timeline


class Assembly:
    """What every driver does with a plan's pieces as they come: kept ones first, in plan order (a made
    speaker's reference before the pieces it settles), then each finished one decoded by the driver, placed,
    kept for a re-run, counted and reported."""

    def __init__(self, run: ScriptRun, kept: Mapping[int, StoredPiece] | None, on_piece, on_progress, on_audio):
        self.run, self.timeline = run, Timeline(run.plan)
        self.on_piece, self.on_progress, self.on_audio = on_piece, on_progress, on_audio
        self.spoken_seconds = 0.0
        self.reused = 0
        for index in sorted(kept or {}):
            run.reuse(index, kept[index].reference)
            self.reused += 1
            self._place(index, kept[index].audio)

    def _place(self, index: int, wav: np.ndarray) -> None:
        block = self.timeline.add(index, wav)
        if self.on_audio is not None and len(block):
            self.on_audio(block)
        if self.on_progress is not None:
            self.on_progress(self.run.pieces_done, len(self.run.plan.pieces), self.spoken_seconds)

    def spoken(self, index: int, wav: np.ndarray) -> None:
        self.spoken_seconds += len(wav) / self.run.plan.sample_rate
        if self.on_piece is not None:
            self.on_piece(index, StoredPiece(wav, self.run.reference_of(index)))
        self._place(index, wav)

    def finish(self, steps: int = 0) -> RenderedScript:
        rendered = self.timeline.finish(self.run.made_voices, steps)
        return replace(rendered, reused=self.reused, spoken=len(self.run.plan.pieces) - self.reused)
