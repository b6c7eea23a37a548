"""ONNX Runtime sessions, and one calling convention for every backbone signature seen in the wild.

Torch-free: this is runtime code.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort

from codes.common.errors import UserError

PROVIDERS = {"cpu": ["CPUExecutionProvider"], "cuda": ["CUDAExecutionProvider", "CPUExecutionProvider"]}
ORT_TO_NUMPY = {
    "tensor(float)": np.float32,
    "tensor(float16)": np.float16,
    "tensor(int64)": np.int64,
    "tensor(bool)": np.bool_,
}


def providers_for(provider: str) -> list[str]:
    if provider not in PROVIDERS:
        raise UserError(f"unknown provider {provider!r}; choose cpu or cuda")
    wanted = PROVIDERS[provider]
    if wanted[0] not in ort.get_available_providers():
        raise UserError(
            f"{wanted[0]} is not available in this onnxruntime build; install onnxruntime-gpu or use --provider cpu"
        )
    return wanted


def make_session(path: Path, provider: str = "cpu", threads: int | None = None,
                 profile_dir: Path | None = None) -> ort.InferenceSession:
    return open_session(path, providers_for(provider), threads, profile_dir)


def open_session(path: Path, providers: list[str] | None = None, threads: int | None = None,
                 profile_dir: Path | None = None) -> ort.InferenceSession:
    """threads None: ONNX Runtime's default, one intra-op thread per physical core.

    profile_dir: ONNX Runtime's profiler writes one JSON per session there (see end_profiling).
    """
    options = ort.SessionOptions()
    options.log_severity_level = 3  # fp16 graphs log a constant-folding warning per layer
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
    if profile_dir is not None:
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(profile_dir) / Path(path).stem)
    try:
        return ort.InferenceSession(str(path), sess_options=options, providers=providers or ["CPUExecutionProvider"])
    except Exception as exc:  # ORT raises its own types for unreadable or invalid graphs
        raise UserError(f"ONNX Runtime cannot load {path}: {str(exc).splitlines()[0]}") from None


class BackboneRunner:
    """Call a backbone graph as hidden = f(inputs_embeds, 4-D bool mask), whatever its signature.

    - "mask4d": ours and the published bidirectional re-exports (attention_mask bool [B,1,S,S]).
    - "genai": the onnxruntime-genai layout (attention_mask int64 [B,S] + empty past key/values).
      Its mask only says which keys exist, so rows with padding cannot be expressed exactly.
    """

    def __init__(self, session: ort.InferenceSession, head_dim: int | None = None):
        self.session = session
        inputs = {i.name: i for i in session.get_inputs()}
        if "inputs_embeds" not in inputs or "attention_mask" not in inputs:
            raise UserError("the backbone graph has no inputs_embeds/attention_mask inputs; it is not an OmniVoice backbone")
        self.embeds_dtype = ORT_TO_NUMPY[inputs["inputs_embeds"].type]
        self.hidden_size = inputs["inputs_embeds"].shape[-1]
        mask = inputs["attention_mask"]
        self.signature = "mask4d" if len(mask.shape) == 4 else "genai"
        self.past = [i for name, i in inputs.items() if name.startswith("past_key_values")]
        if self.past and head_dim is None and isinstance(self.past[0].shape[-1], str):
            raise UserError("this genai-style backbone needs its head size (genai_config.json next to it)")
        self.head_dim = head_dim
        outputs = [o.name for o in session.get_outputs()]
        self.output_name = "hidden_states" if "hidden_states" in outputs else outputs[0]

    def __call__(self, inputs_embeds: np.ndarray, attention_mask: np.ndarray) -> np.ndarray:
        feed = {"inputs_embeds": inputs_embeds.astype(self.embeds_dtype, copy=False)}
        if self.signature == "mask4d":
            feed["attention_mask"] = attention_mask
        else:
            batch = inputs_embeds.shape[0]
            feed["attention_mask"] = attention_mask.any(axis=(1, 2)).astype(np.int64)
            for past in self.past:
                heads = past.shape[1]
                dim = self.head_dim if isinstance(past.shape[3], str) else past.shape[3]
                feed[past.name] = np.zeros((batch, heads, 0, dim), dtype=ORT_TO_NUMPY[past.type])
        hidden = self.session.run([self.output_name], feed)[0]
        return hidden.astype(np.float32, copy=False)


def genai_head_dim(folder: Path) -> int | None:
    """Head size recorded by onnxruntime-genai next to its graph, if any."""
    config = Path(folder) / "genai_config.json"
    if not config.is_file():
        return None
    decoder = json.loads(config.read_text()).get("model", {}).get("decoder", {})
    return decoder.get("head_size")
