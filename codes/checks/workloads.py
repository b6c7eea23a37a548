"""The benchmarks' named workloads: the texts, forced target lengths and step counts every engine gets alike."""

from __future__ import annotations

from dataclasses import dataclass

from codes.runtime.contract.specs import FRAME_RATE

TEXT_10S = ("The old lighthouse keeper climbed the spiral stairs every evening, counting each of the one hundred "
            "and twelve steps, and lit the lamp that guided the fishing boats safely home through the fog.")
TEXT_3S = "Please leave the package by the front door."
TEXTS_BATCH = [
    "Good morning, and welcome to the station.",
    "The next train to the airport leaves from platform four.",
    "Tickets can be bought from the machines near the entrance.",
    "Thank you for travelling with us today.",
]


@dataclass(frozen=True)
class Case:
    name: str
    texts: tuple[str, ...]
    seconds: tuple[float, ...]  # forced target lengths, identical for every engine
    num_steps: int = 32

    @property
    def audio_seconds(self) -> float:
        return float(sum(self.seconds))

    @property
    def frames(self) -> int:
        return sum(int(s * FRAME_RATE) for s in self.seconds)

    def with_steps(self, num_steps: int) -> Case:
        return Case(self.name, self.texts, self.seconds, num_steps=num_steps)


WORKLOADS = {
    "default": (
        Case("10 s utterance", (TEXT_10S,), (10.0,)),
        Case("3 s utterance", (TEXT_3S,), (3.0,)),
        Case("batch of 4 x 3 s", tuple(TEXTS_BATCH), (3.0,) * 4),
    ),
    # The headline case alone, for full-size runs where every engine takes minutes per utterance.
    "10s": (Case("10 s utterance", (TEXT_10S,), (10.0,)),),
    # CI's smoke test: every code path, seconds of work.
    "smoke": (
        Case("1 s utterance", (TEXT_3S,), (1.0,), num_steps=4),
        Case("batch of 2 x 1 s", tuple(TEXTS_BATCH[:2]), (1.0, 1.0), num_steps=4),
    ),
}

# No sampling noise: every engine, and every run of one, decodes the same tokens.
DETERMINISTIC = dict(position_temperature=0.0, class_temperature=0.0)


def workload_cases(workload: str, num_steps: int | None = None) -> tuple[Case, ...]:
    """The named cases; num_steps overrides their step count (each step is one identical forward)."""
    cases = WORKLOADS[workload]
    return cases if num_steps is None else tuple(c.with_steps(num_steps) for c in cases)
