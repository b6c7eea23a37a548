"""omnivoice-onnx: build OmniVoice into ONNX and run it with ONNX Runtime alone.

    from codes import OmniVoice, OmniVoiceGenerationConfig, VoiceClonePrompt   # upstream's API (codes/runtime/api.py)
"""

from codes.common.version import VERSION as __version__  # noqa: F401 (the package's own attribute)

_API = ("OmniVoice", "OmniVoiceGenerationConfig", "VoiceClonePrompt")


def __getattr__(name: str):
    # Loaded on first use, so `import codes.common.errors` (every script's first import) stays light.
    if name in _API:
        from codes.runtime import api

        return getattr(api, name)
    raise AttributeError(f"module 'codes' has no attribute {name!r}")


def __dir__():
    return sorted([*globals(), *_API])
