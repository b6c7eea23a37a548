"""The backbone through onnxruntime-genai's model builder, then made bidirectional."""

from __future__ import annotations

import shutil
from pathlib import Path

import onnx

from codes.common.quiet import library_output
from codes.export.bidirectional import make_bidirectional
from codes.export.onnx_io import save_model
from codes.export.profiles import GraphRecipe
from codes.runtime.contract.specs import BACKBONE

def write_standalone_llm(omnivoice, out_dir: Path) -> Path:
    """The backbone as a standalone Qwen3ForCausalLM folder: the input the genai builder takes."""
    from transformers import Qwen3ForCausalLM

    causal_lm = Qwen3ForCausalLM(omnivoice.llm.config)
    causal_lm.model.load_state_dict(omnivoice.llm.state_dict())
    causal_lm.config.architectures = ["Qwen3ForCausalLM"]
    causal_lm.save_pretrained(str(out_dir))
    return Path(out_dir)


def genai_options(execution_provider: str) -> list[str]:
    options = ["exclude_embeds=true", "exclude_lm_head=true"]
    if execution_provider == "cuda":
        # Keep q/k norms out of GQA so one graph layout serves every provider (CPU rejects the fused form).
        options.append("fuse_qk_norm_gqa=false")
    return options


def build_genai_causal(hf_dir: Path, out_dir: Path, precision: str, execution_provider: str) -> Path:
    """onnxruntime-genai create_model as the recipe calls it, at the builder's `precision`;
    returns the causal model.onnx."""
    from onnxruntime_genai.models import builder

    args = ("Qwen/Qwen3-0.6B", str(hf_dir), str(out_dir), precision, execution_provider,
            str(Path(out_dir) / "cache"))
    # The builder prints a line per tensor: kept aside, and shown only if the build fails.
    with library_output("onnxruntime-genai's builder"):
        # create_model needs parse_extra_options first (docs/DESIGN.md §genai-options).
        options = builder.parse_extra_options(*args, genai_options(execution_provider))
        builder.create_model(*args, **options)
    return Path(out_dir) / "model.onnx"


def build_llm_genai(omnivoice, out_dir: Path, work_dir: Path, recipe: GraphRecipe, execution_provider: str) -> Path:
    hf_dir = write_standalone_llm(omnivoice, Path(work_dir) / "qwen3_hf")
    causal = build_genai_causal(hf_dir, Path(work_dir) / "genai", recipe.genai_precision, execution_provider)
    model = make_bidirectional(onnx.load(str(causal)))
    if recipe.standard_attention:  # the web profile (codes/export/web_attention.py)
        from codes.export.web_attention import standard_attention

        config = omnivoice.llm.config
        model = standard_attention(model, getattr(config, "head_dim", None)
                                   or config.hidden_size // config.num_attention_heads)
    model = recipe.apply(model)
    final = save_model(model, Path(out_dir) / BACKBONE.filename)
    shutil.rmtree(Path(work_dir) / "genai", ignore_errors=True)
    shutil.rmtree(hf_dir, ignore_errors=True)
    return final
