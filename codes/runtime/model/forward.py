"""One decoding step's model forward: embeddings -> backbone -> heads over the target windows.

Two ways to join the graphs (docs/DESIGN.md §step-on-device):
- on the host: numpy between the graphs. The reference, and what folders without glue graphs run;
- on the device: the build's glue graphs join them on the execution provider (I/O binding), so
  embeddings, hidden states and logits never cross to the host; only token ids go up.

Either way:
- Conditional and unconditional rows run as two backbone calls, so unconditional rows are not
  padded to the conditional length; each row attends only within its own valid square, so the
  split changes no result.
- The heads see only target positions.

Torch-free: this is runtime code.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import onnxruntime as ort

from codes.runtime.contract import specs
from codes.runtime.contract.sessions import BackboneRunner, run_bound
from codes.runtime.voices.prompt import CfgBatch


def timed(timings: dict[str, float], stage: str, fn, *args):
    """fn(*args), its seconds added to timings[stage]."""
    start = time.perf_counter()
    result = fn(*args)
    timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start
    return result


def window_index(batch: CfgBatch, target_lens: list[int]) -> np.ndarray:
    """[N, T, 1] int64: where each item's target cells sit in its conditional row (T: the longest
    target); cells past an item's target repeat its last position (their logits are never read)."""
    longest = max(target_lens)
    index = np.zeros((len(target_lens), longest, 1), dtype=np.int64)
    for item, (cond_len, target_len) in enumerate(zip(batch.cond_lens, target_lens)):
        positions = np.arange(cond_len - target_len, cond_len - target_len + longest)
        index[item, :, 0] = np.minimum(positions, cond_len - 1)
    return index


@dataclass
class _Placed:
    """A batch's constant inputs, on the device for as long as the batch decodes."""

    batch: CfgBatch
    target_lens: list[int]
    values: dict[str, ort.OrtValue]
    arrays: list[np.ndarray]  # what CPU OrtValues share memory with: kept alive here


class StepForward:
    """The three model graphs of one step and, where the build has them and they fit, its glue."""

    def __init__(self, embeddings: ort.InferenceSession, backbone: BackboneRunner, heads: ort.InferenceSession,
                 glue: dict[str, ort.InferenceSession], device: str, timings: dict[str, float] | None = None):
        """glue: the build's glue sessions by key (empty: the host joins the graphs).
        timings: seconds per stage, added to as the graphs run."""
        self.embeddings, self.backbone, self.heads = embeddings, backbone, heads
        self.device = device
        self.timings = timings if timings is not None else {}
        self.glue = glue if glue_fits(embeddings, backbone, heads, glue) else {}
        self._prompt: tuple[CfgBatch, np.ndarray] | None = None  # see _prompt_embeddings
        self._placed: _Placed | None = None

    @property
    def on_device(self) -> bool:
        return bool(self.glue)

    def _timed(self, stage: str, fn, *args):
        return timed(self.timings, stage, fn, *args)

    # --- on the host ---------------------------------------------------------------------------

    def embed(self, input_ids: np.ndarray, audio_mask: np.ndarray) -> np.ndarray:
        return self._timed("embeddings", self.embeddings.run, None, {"input_ids": input_ids, "audio_mask": audio_mask})[0]

    def _prompt_embeddings(self, batch: CfgBatch, num_items: int) -> np.ndarray:
        """The conditional rows' embeddings, computed once per batch: only their target cells change.

        The loop writes each step's target embeddings into this buffer; the prompt part stays.
        The batch itself is the key (held, so its id cannot be reused by another).
        """
        if self._prompt is None or self._prompt[0] is not batch:
            rows = slice(0, num_items)
            self._prompt = (batch, self.embed(batch.input_ids[rows], batch.audio_mask[rows]))
        return self._prompt[1]

    def host_logits(self, input_ids: np.ndarray, batch: CfgBatch, target_lens: list[int],
                    device: str | None = None):
        """The heads' logits over the target windows, [2N, 8, T, V]: the N items' conditional rows,
        then their unconditional rows, joined on the host. A target's cells are the same in both
        rows, so one embeddings call on the unconditional rows serves both, and the prompt is
        embedded once per batch.

        device: leave the logits there as an OrtValue (I/O binding) instead of returning numpy.
        """
        num_items, longest = len(target_lens), max(target_lens)
        cond_rows, uncond_rows = slice(0, num_items), slice(num_items, 2 * num_items)
        target_embeds = self.embed(input_ids[uncond_rows, :, :longest], batch.audio_mask[uncond_rows, :longest])
        cond_embeds = self._prompt_embeddings(batch, num_items)
        for item, (cond_len, target_len) in enumerate(zip(batch.cond_lens, target_lens)):
            cond_embeds[item, cond_len - target_len:cond_len] = target_embeds[item, :target_len]
        cond_hidden = self._timed("backbone", self.backbone, cond_embeds, batch.attention_mask[cond_rows])
        uncond_hidden = self._timed("backbone", self.backbone, target_embeds,
                                    batch.attention_mask[uncond_rows, :, :longest, :longest])
        windows = np.zeros((2 * num_items, longest, cond_hidden.shape[-1]), dtype=cond_hidden.dtype)
        for item, (cond_len, target_len) in enumerate(zip(batch.cond_lens, target_lens)):
            windows[item, :target_len] = cond_hidden[item, cond_len - target_len:cond_len]
        windows[num_items:] = uncond_hidden
        if device is None:
            return self._timed("heads", self.heads.run, None, {specs.HEADS.input_names[0]: windows})[0]
        return self._timed("heads", run_bound, self.heads, {specs.HEADS.input_names[0]: windows},
                           {specs.HEADS.output_names[0]: device})[0]

    # --- on the device -------------------------------------------------------------------------

    def device_logits(self, input_ids: np.ndarray, batch: CfgBatch, target_lens: list[int]) -> ort.OrtValue:
        """As host_logits, left on the device, with nothing but the token ids crossing to it.

        The conditional rows are embedded whole each step: splicing the targets in would take a
        graph of its own, and an embedding is a lookup per cell, next to nothing beside the backbone.
        """
        num_items, longest = len(target_lens), max(target_lens)
        placed = self._place(batch, target_lens)
        cond_embeds = self._device_embed(input_ids[:num_items], placed.values["cond_audio_mask"])
        target_embeds = self._device_embed(np.ascontiguousarray(input_ids[num_items:, :, :longest]),
                                           placed.values["target_audio_mask"])
        cond_hidden = self._device_backbone(cond_embeds, placed.values["cond_mask"])
        target_hidden = self._device_backbone(target_embeds, placed.values["target_mask"])
        windows_spec = specs.TARGET_WINDOWS
        windows = self._timed("glue", run_bound, self.glue[windows_spec.key],
                              dict(zip(windows_spec.input_names, (cond_hidden, target_hidden,
                                                                   placed.values["window_index"]))),
                              {windows_spec.output_names[0]: self.device})[0]
        return self._timed("heads", run_bound, self.heads, {specs.HEADS.input_names[0]: windows},
                           {specs.HEADS.output_names[0]: self.device})[0]

    def _device_embed(self, input_ids: np.ndarray, audio_mask: ort.OrtValue) -> ort.OrtValue:
        embeds = self._timed("embeddings", run_bound, self.embeddings, {"input_ids": input_ids, "audio_mask": audio_mask},
                             {specs.EMBEDDINGS.output_names[0]: self.device})[0]
        cast = self.glue.get(specs.BACKBONE_INPUT.key)
        if cast is None:
            return embeds
        return self._timed("glue", run_bound, cast, {specs.BACKBONE_INPUT.input_names[0]: embeds},
                           {specs.BACKBONE_INPUT.output_names[0]: self.device})[0]

    def _device_backbone(self, embeds: ort.OrtValue, mask: ort.OrtValue) -> ort.OrtValue:
        return self._timed("backbone", run_bound, self.backbone.session,
                           {"inputs_embeds": embeds, "attention_mask": mask}, {self.backbone.output_name: self.device})[0]

    def _place(self, batch: CfgBatch, target_lens: list[int]) -> _Placed:
        """The batch's masks and window index on the device, sent once per batch."""
        if self._placed is not None and self._placed.batch is batch and self._placed.target_lens == target_lens:
            return self._placed
        num_items, longest = len(target_lens), max(target_lens)
        arrays = {
            "cond_audio_mask": batch.audio_mask[:num_items],
            "target_audio_mask": batch.audio_mask[num_items:, :longest],
            "cond_mask": batch.attention_mask[:num_items],
            "target_mask": batch.attention_mask[num_items:, :, :longest, :longest],
            "window_index": window_index(batch, target_lens),
        }
        arrays = {name: np.ascontiguousarray(array) for name, array in arrays.items()}
        values = {name: ort.OrtValue.ortvalue_from_numpy(array, self.device, 0) for name, array in arrays.items()}
        self._placed = _Placed(batch, list(target_lens), values, list(arrays.values()))
        return self._placed


def _types(session: ort.InferenceSession, side: str) -> dict[str, str]:
    return {t.name: t.type for t in (session.get_inputs() if side == "inputs" else session.get_outputs())}


def glue_fits(embeddings, backbone: BackboneRunner, heads, glue: dict[str, ort.InferenceSession]) -> bool:
    """Whether the glue graphs join these graphs: a backbone passed with --backbone may take or give
    another float type than the one the build's glue was made for."""
    windows = glue.get(specs.TARGET_WINDOWS.key)
    if windows is None:
        return False
    embeds_type = _types(embeddings, "outputs")[specs.EMBEDDINGS.output_names[0]]
    cast = glue.get(specs.BACKBONE_INPUT.key)
    if cast is not None:
        if _types(cast, "inputs")[specs.BACKBONE_INPUT.input_names[0]] != embeds_type:
            return False
        embeds_type = _types(cast, "outputs")[specs.BACKBONE_INPUT.output_names[0]]
    hidden_type = _types(backbone.session, "outputs")[backbone.output_name]
    windows_in = _types(windows, "inputs")
    return (embeds_type == _types(backbone.session, "inputs")["inputs_embeds"]
            and {windows_in[n] for n in specs.TARGET_WINDOWS.input_names[:2]} == {hidden_type}
            and _types(windows, "outputs")[specs.TARGET_WINDOWS.output_names[0]]
            == _types(heads, "inputs")[specs.HEADS.input_names[0]])
