"""LoRA adapters in upstream's fine-tuning layout (PEFT: adapter_config.json, adapter_model.safetensors, the audio
embeddings and heads saved whole), made for a checkpoint the project generates; their weights are random and
nonzero, so merging one changes every adapted layer."""

from __future__ import annotations

from pathlib import Path

TARGET_MODULES = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def write_adapter(base: Path, out_dir: Path, seed: int = 0, rank: int = 4) -> Path:
    import torch
    from omnivoice.models.omnivoice import OmniVoice
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    model = OmniVoice.from_pretrained(str(base), train=True, dtype=torch.float32)
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=TARGET_MODULES,
                        modules_to_save=["audio_embeddings", "audio_heads"], init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    with torch.no_grad():  # a fine-tune moves the saved-whole modules too
        for name, parameter in peft_model.named_parameters():
            if "modules_to_save" in name:
                parameter.add_(0.02 * torch.randn_like(parameter))
    peft_model.save_pretrained(str(out_dir))
    return Path(out_dir)
