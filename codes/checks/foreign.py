"""Probing a folder that is not an omnivoice-onnx build: find its backbone graph and ask if it is bidirectional.

Published OmniVoice ONNX folders hold either a bidirectional re-export (4-D bool mask,
what the runtime's BackboneRunner calls) or onnxruntime-genai's layout (int64 key mask
[B,S] plus past key/values), which only the checks ever call: GenaiBackboneRunner.
See docs/DESIGN.md §foreign-layouts.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from codes.checks.report import Row, probe_row
from codes.common.errors import UserError
from codes.runtime.contract.probe import probe_bidirectional
from codes.runtime.contract.sessions import ORT_TO_NUMPY, BackboneRunner, backbone_session

FOREIGN_BACKBONE_NAMES = ("llm_decoder.onnx", "llm_backbone_fp32.onnx", "llm_backbone.onnx", "model.onnx")


class GenaiBackboneRunner:
    """Call an onnxruntime-genai backbone as hidden = f(inputs_embeds, 4-D bool mask).

    Its mask only says which keys exist, so rows with padding cannot be expressed exactly;
    the past key/values go in empty, but with their real head size.
    """

    signature = "genai"

    def __init__(self, session: ort.InferenceSession, head_dim: int | None = None):
        self.session = session
        inputs = {i.name: i for i in session.get_inputs()}
        if "inputs_embeds" not in inputs or "attention_mask" not in inputs:
            raise UserError("the backbone graph has no inputs_embeds/attention_mask inputs; it is not an OmniVoice backbone")
        self.embeds_dtype = ORT_TO_NUMPY[inputs["inputs_embeds"].type]
        self.hidden_size = inputs["inputs_embeds"].shape[-1]
        self.past = [i for name, i in inputs.items() if name.startswith("past_key_values")]
        if self.past and head_dim is None and isinstance(self.past[0].shape[-1], str):
            raise UserError("this genai-style backbone needs its head size (genai_config.json next to it)")
        self.head_dim = head_dim
        outputs = [o.name for o in session.get_outputs()]
        self.output_name = "hidden_states" if "hidden_states" in outputs else outputs[0]

    def __call__(self, inputs_embeds: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        batch = inputs_embeds.shape[0]
        feed = {"inputs_embeds": inputs_embeds.astype(self.embeds_dtype, copy=False),
                "attention_mask": attention_mask.any(axis=(1, 2)).astype(np.int64)}
        for past in self.past:
            dim = self.head_dim if isinstance(past.shape[3], str) else past.shape[3]
            feed[past.name] = np.zeros((batch, past.shape[1], 0, dim), dtype=ORT_TO_NUMPY[past.type])
        hidden = self.session.run([self.output_name], feed)[0]
        return hidden.astype(np.float32, copy=False)


def genai_head_dim(folder: Path) -> int | None:
    """Head size recorded by onnxruntime-genai next to its graph, if any."""
    config = Path(folder) / "genai_config.json"
    if not config.is_file():
        return None
    decoder = json.loads(config.read_text()).get("model", {}).get("decoder", {})
    return decoder.get("head_size")


def head_dim_from_graph(path: Path) -> int | None:
    """genai graphs keep rotary tables as cos_cache [max_pos, head_dim/2] (full rotary in Qwen3)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        if tensor.name == "cos_cache":
            return 2 * tensor.dims[1]
    return None


def foreign_backbone_runner(path: Path, provider: str = "cpu") -> BackboneRunner | GenaiBackboneRunner:
    """The runtime's runner for a 4-D mask graph, the genai one for any other."""
    session = backbone_session(path, provider)
    mask = next((i for i in session.get_inputs() if i.name == "attention_mask"), None)
    if mask is not None and len(mask.shape) == 4:
        return BackboneRunner(session)
    path = Path(path)
    return GenaiBackboneRunner(session, head_dim=genai_head_dim(path.parent) or head_dim_from_graph(path))


def foreign_backbone_rows(folder: Path, provider: str = "cpu") -> list[Row]:
    """A folder that is not ours (no omnivoice-onnx manifest): find its backbone and probe it."""
    path = next((Path(folder) / n for n in FOREIGN_BACKBONE_NAMES if (Path(folder) / n).is_file()), None)
    if path is None:
        raise UserError(f"{folder} has no omnivoice-onnx manifest and no backbone graph named "
                        f"{' / '.join(FOREIGN_BACKBONE_NAMES)}; pass a build folder")
    runner = foreign_backbone_runner(path, provider)
    return [probe_row(probe_bidirectional(runner), check=f"bidirectionality probe ({path.name})")]
