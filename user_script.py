"""Olive model loaders and dummy-input functions (Olive imports this file by path).

Each loader takes the checkpoint folder and returns the torch module whose
forward is one ONNX sub-model; the wrappers themselves live in codes/export.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from codes.export.checkpoint import load_omnivoice  # noqa: E402
from codes.export.wrappers import dummy_inputs, wrap  # noqa: E402


# --- OmniVoice backbone sub-models -------------------------------------------------------


def load_audio_embeddings_encoder(model_path):
    return wrap("audio_embeddings_encoder", load_omnivoice(Path(model_path)))


def load_llm_backbone(model_path):
    return wrap("llm_decoder", load_omnivoice(Path(model_path)))


def load_audio_heads_decoder(model_path):
    return wrap("audio_heads_decoder", load_omnivoice(Path(model_path)))


def _hidden_size(handler) -> int:
    """Olive passes its model handler; the checkpoint's config says the width without loading weights."""
    config = json.loads((Path(handler.model_path) / "config.json").read_text())
    return config["llm_config"]["hidden_size"]


def audio_embeddings_encoder_inputs(handler=None):
    return dummy_inputs("audio_embeddings_encoder", hidden_size=0)


def llm_backbone_inputs(handler):
    return dummy_inputs("llm_decoder", _hidden_size(handler))


def audio_heads_decoder_inputs(handler):
    return dummy_inputs("audio_heads_decoder", _hidden_size(handler))


# --- Higgs Audio V2 codec (codes/export/higgs.py) ----------------------------------------
# Olive's model_path is the codec folder (`<ckpt>/audio_tokenizer`).

from codes.export import higgs as _higgs  # noqa: E402


def load_higgs_acoustic_encoder(model_path):
    return _higgs.wrap("acoustic_encoder", model_path)


def load_higgs_semantic_encoder(model_path):
    return _higgs.wrap("semantic_encoder", model_path)


def load_higgs_quantizer_encoder(model_path):
    return _higgs.wrap("quantizer_encoder", model_path)


def load_higgs_higgs_decoder(model_path):
    return _higgs.wrap("higgs_decoder", model_path)


def higgs_acoustic_encoder_inputs(handler):
    return _higgs.dummy_inputs("acoustic_encoder", handler.model_path)


def higgs_semantic_encoder_inputs(handler):
    return _higgs.dummy_inputs("semantic_encoder", handler.model_path)


def higgs_quantizer_encoder_inputs(handler):
    return _higgs.dummy_inputs("quantizer_encoder", handler.model_path)


def higgs_higgs_decoder_inputs(handler):
    return _higgs.dummy_inputs("higgs_decoder", handler.model_path)
