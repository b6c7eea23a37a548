"""The build contract: what a build folder holds and how it is opened (graph specs, generation settings, the
manifest, the bidirectionality probe, ONNX Runtime sessions and the int8 weights fitted to the host). The runtime's ground floor, above data/."""
