"""omnivoice-onnx: build OmniVoice into ONNX and run it with ONNX Runtime alone."""

__version__ = "0.1.0"
