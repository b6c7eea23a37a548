"""The backbone through onnxruntime-genai's model builder, then made bidirectional."""

from __future__ import annotations

import contextlib
import io
import shutil
import sys
from pathlib import Path

import onnx

from codes.export.bidirectional import make_bidirectional
from codes.export.onnx_io import save_model

# int4 is the builder's MatMulNBits (accuracy_level 4 on CPU). int8 is built in fp32 and then
# quantized dynamically (MatMulInteger: int8 weights, uint8 activations): the builder's own int8
# MatMulNBits ran ~10x slower than that here.
GENAI_PRECISION = {"fp32": "fp32", "fp16": "fp16", "int8": "fp32", "int4": "int4"}


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
    """onnxruntime-genai create_model as the recipe calls it; returns the causal model.onnx."""
    from onnxruntime_genai.models import builder

    args = ("Qwen/Qwen3-0.6B", str(hf_dir), str(out_dir), GENAI_PRECISION[precision], execution_provider,
            str(Path(out_dir) / "cache"))
    # The builder prints a line per tensor; keep it, and show it only if the build fails.
    log = io.StringIO()
    try:
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            # create_model needs parse_extra_options first (docs/DESIGN.md §genai-options).
            options = builder.parse_extra_options(*args, genai_options(execution_provider))
            builder.create_model(*args, **options)
    except Exception:
        sys.stderr.write(log.getvalue()[-4000:])
        raise
    return Path(out_dir) / "model.onnx"


def quantize_int8_dynamic(model: onnx.ModelProto, work_dir: Path) -> onnx.ModelProto:
    """MatMul weights to int8 with dynamic uint8 activations (MatMulInteger); attention stays fp32."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    work_dir.mkdir(parents=True, exist_ok=True)
    source, target = work_dir / "fp32.onnx", work_dir / "int8.onnx"
    save_model(model, source)
    quantize_dynamic(str(source), str(target), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                     extra_options={"MatMulConstBOnly": True}, use_external_data_format=True)
    return onnx.load(str(target))


def build_llm_genai(omnivoice, out_dir: Path, work_dir: Path, precision: str, execution_provider: str) -> Path:
    hf_dir = write_standalone_llm(omnivoice, Path(work_dir) / "qwen3_hf")
    causal = build_genai_causal(hf_dir, Path(work_dir) / "genai", precision, execution_provider)
    model = make_bidirectional(onnx.load(str(causal)))
    if precision == "int8":
        model = quantize_int8_dynamic(model, Path(work_dir) / "int8")
    final = save_model(model, Path(out_dir) / "llm_decoder.onnx")
    shutil.rmtree(Path(work_dir) / "genai", ignore_errors=True)
    shutil.rmtree(hf_dir, ignore_errors=True)
    return final
