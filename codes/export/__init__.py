"""Build-time code: turns an upstream checkpoint into ONNX graphs (needs torch)."""
