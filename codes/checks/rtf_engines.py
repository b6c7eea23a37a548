"""What eval.py --mode rtf times on a workload: one of our builds (OnnxEngine) or upstream's torch model
(TorchEngine), each running a Case the same way and reporting its stages."""

from __future__ import annotations

import time
from pathlib import Path

from codes.checks.workloads import DETERMINISTIC, Case


class OnnxEngine:
    def __init__(self, model_dir: Path, threads: int, provider: str | None = None, higgs_dir: Path | None = None,
                 backbone: Path | None = None):
        from codes.runtime.synthesis import OmniVoiceOnnx

        self.model_dir, self.higgs_dir, self.backbone = Path(model_dir), higgs_dir, backbone
        self.tts = OmniVoiceOnnx(model_dir, higgs_dir=higgs_dir, provider=provider, threads=threads, backbone=backbone)
        data = self.tts.manifest.data
        self.kind, self.profile = "onnx", data.get("profile")
        # One word when the three backbone graphs agree ("fp32"), else embeddings/llm/heads as equiv prints it.
        graphs = [self.tts.manifest.graph_precision[k] for k in ("embeddings", "llm", "heads")]
        self.precision = graphs[0] if len(set(graphs)) == 1 else "/".join(graphs)
        self.name = f"ours {self.profile} ({self.model_dir.name})"  # display only

    def run(self, case: Case, seed: int = 0) -> dict:
        self.tts.timings.clear()
        start = time.perf_counter()
        _, codes = self.tts.generate(list(case.texts), duration=list(case.seconds), num_steps=case.num_steps,
                                     seed=seed, return_codes=True, **DETERMINISTIC)
        total = time.perf_counter() - start
        stages = dict(self.tts.timings)
        return {"total": total, "stages": stages, "codes": codes}


class TorchEngine:
    def __init__(self, checkpoint: Path, dtype: str, threads: int):
        import torch
        from omnivoice.models.omnivoice import OmniVoice

        torch.set_num_threads(threads)
        self.dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[dtype]
        self.model = OmniVoice.from_pretrained(str(checkpoint), attn_implementation="sdpa", dtype=self.dtype).eval()
        self.model.audio_tokenizer.float()  # upstream keeps its codec in fp32
        self.kind, self.precision, self.profile = "torch", dtype, None
        self.name = f"upstream torch {dtype}"  # display only

    def run(self, case: Case, seed: int = 0) -> dict:
        """upstream `generate` for short texts, stage by stage: the same calls in the same order."""
        import torch
        from omnivoice.models.omnivoice import OmniVoiceGenerationConfig

        torch.manual_seed(seed)
        config = OmniVoiceGenerationConfig(num_step=case.num_steps, **DETERMINISTIC)
        clock = time.perf_counter()
        with torch.inference_mode():
            task = self.model._preprocess_all(text=list(case.texts), duration=list(case.seconds))
            prompt_done = time.perf_counter()
            tokens = self.model._generate_iterative(task, config)
            steps_done = time.perf_counter()
            for item, item_tokens in enumerate(tokens):
                self.model._decode_and_post_process(item_tokens, task.ref_rms[item], config)
        end = time.perf_counter()
        stages = {"prompt": prompt_done - clock, "decoding steps": steps_done - prompt_done,
                  "codec + post-processing": end - steps_done}
        return {"total": end - clock, "stages": stages, "codes": [t.numpy() for t in tokens]}


def describe(engine) -> dict:
    """The fields that identify an engine; its name is for display."""
    return {"kind": engine.kind, "precision": engine.precision, "profile": engine.profile}
