"""Faults injected into the real engine: a noise source that raises (test_engine.py, test_hostile.py)."""

from __future__ import annotations

from codes.runtime.decoding import RandomNoise


class FailingNoise:
    """A noise source that raises on its nth draw: an item that breaks inside a decoding step."""

    def __init__(self, error: BaseException, after: int = 1):
        self.error, self.left, self.inner = error, after, RandomNoise(0)

    def uniform(self, shape):
        self.left -= 1
        if self.left < 0:
            raise self.error
        return self.inner.uniform(shape)
