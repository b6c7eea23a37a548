"""LiveKit Agents plugin for an omnivoice-onnx server: `from livekit.plugins import omnivoice`,
`omnivoice.TTS(base_url=..., api_key=..., voice=..., language=...)`."""

import logging

from livekit.agents import Plugin

from .tts import TTS, OmniVoiceStream

__all__ = ["TTS", "OmniVoiceStream"]
__version__ = "0.1.0"


class OmniVoicePlugin(Plugin):
    def __init__(self) -> None:
        super().__init__(__name__, __version__, __package__, logging.getLogger(__name__))


Plugin.register_plugin(OmniVoicePlugin())
