"""Pipecat TTS service for an omnivoice-onnx server: `from pipecat_omnivoice import OmniVoiceTTSService`."""

from .tts import OmniVoiceTTSService

__all__ = ["OmniVoiceTTSService"]
__version__ = "0.1.0"
