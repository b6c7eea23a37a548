"""Samples: reading, resampling, silence handling and post-processing in numpy, the Higgs codec's graphs, and the
audio and code files the runtimes write."""
