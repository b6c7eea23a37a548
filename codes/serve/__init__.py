"""serve.py's library: OpenAI's speech API over the runtime's step-level batching engine.

Scheduling and I/O only (encoders, voices, sentence jobs, the HTTP layer); the decoding maths stay
in codes/runtime.
"""
