"""Every generation setting in one place, with upstream's defaults (OmniVoiceGenerationConfig).

The API, the CLI flags and the manifest defaults all read this dataclass, so a
default changes here only. Bad values raise UserError when the settings are made.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from codes.common.errors import UserError
from codes.runtime.contract.specs import FRAME_RATE


# Upstream's OmniVoiceGenerationConfig spells the steps `num_step`; the recipe's flag is --num_steps.
ALIASES = {"num_step": "num_steps"}
# A script's segments sharing a step, by provider, unless asked. On a small CPU a step costs its positions, and a
# shared step pads each item to the longest: batched, the full-size cpu_int8 build spoke the benchmark's dialogue
# in 1.5x the time one by one took, and its SRT in 1.1x, at 2.5x the memory (bench/script_results.md). On a GPU a
# step's cost is mostly fixed (the engine's premise, docs/DESIGN.md §scheduling), so sharing comes nearly free.
SCRIPT_MAX_BATCH = {"cpu": 1, "cuda": 8}


@dataclass(frozen=True)
class GenerationSettings:
    num_steps: int = 32  # decoding steps; each reveals part of the masked target
    guidance_scale: float = 2.0  # classifier-free guidance; 0 turns it off
    t_shift: float = 0.1  # < 1 reveals few cells early and many late
    layer_penalty_factor: float = 5.0  # score penalty per codebook index: coarse codebooks first
    position_temperature: float = 5.0  # Gumbel noise on which cells to reveal; 0 = deterministic
    class_temperature: float = 0.0  # Gumbel sampling of the token values; 0 = argmax
    denoise: bool = True  # prepend <|denoise|> when there is a reference
    preprocess_prompt: bool = True  # trim silence from the reference, end its text with punctuation
    postprocess_output: bool = True  # remove long silences from the output
    audio_chunk_duration: float = 15.0  # seconds per chunk for long text
    audio_chunk_threshold: float = 30.0  # chunk only when the estimate is longer than this (s)
    pad_duration: float = 0.1  # silence added on each side of the output (s)
    fade_duration: float = 0.1  # fade-in/out length (s)

    def __post_init__(self):
        for name in ("denoise", "preprocess_prompt", "postprocess_output"):
            if not isinstance(getattr(self, name), bool):
                raise UserError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if isinstance(self.num_steps, bool) or not isinstance(self.num_steps, int) or self.num_steps < 1:
            raise UserError(f"num_steps must be a whole number >= 1, got {self.num_steps!r}")
        rules = {
            "guidance_scale": (lambda v: True, "a finite number"),
            "t_shift": (lambda v: v > 0, "> 0"),
            "layer_penalty_factor": (lambda v: True, "a finite number"),
            "position_temperature": (lambda v: v >= 0, ">= 0 (0 turns the noise off)"),
            "class_temperature": (lambda v: v >= 0, ">= 0 (0 means argmax)"),
            "audio_chunk_duration": (lambda v: v > 0, "> 0 seconds"),
            "audio_chunk_threshold": (lambda v: v >= 0, ">= 0 seconds"),
            "pad_duration": (lambda v: v >= 0, ">= 0 seconds"),
            "fade_duration": (lambda v: v >= 0, ">= 0 seconds"),
        }
        for name, (is_valid, wanted) in rules.items():
            value = getattr(self, name)
            is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not is_number or not math.isfinite(value) or not is_valid(value):
                raise UserError(f"{name} must be {wanted}, got {value!r}")

    def replace(self, **changes) -> GenerationSettings:
        """A copy with some settings changed (validated again); unknown names raise UserError."""
        changes = {ALIASES.get(name, name): value for name, value in changes.items()}
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise UserError(f"unknown generation setting(s): {', '.join(unknown)}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> GenerationSettings:
        return cls().replace(**values)


def max_item_frames(settings: GenerationSettings) -> int:
    """The longest target one work item may have: one chunk (upstream chunks anything longer)."""
    return int(settings.audio_chunk_threshold * FRAME_RATE)


# The numbers a user may set for one run or one request, and their types: inference.py's and
# corpus.py's flags (the recipe's names) and the server's speech request fields are these.
TUNABLE = {"num_steps": int, "guidance_scale": float, "t_shift": float, "layer_penalty_factor": float,
               "position_temperature": float, "class_temperature": float}


# The switches, by upstream's names, as its CLIs take them (--denoise false); ours (--no_denoise) stay too.
SWITCHES = {"denoise": "the <|denoise|> token when cloning", "preprocess_prompt": "silence trimming of the "
            "reference clip and end punctuation on its transcript", "postprocess_output": "removal of long "
            "silences from the output"}
CHUNKING = ("audio_chunk_duration", "audio_chunk_threshold")
_NEGATED = {"denoise": "no_denoise", "postprocess_output": "no_postprocess"}


def true_or_false(value: str) -> bool:
    """upstream's str2bool: yes/true/t/y/1 and no/false/f/n/0."""
    word = value.strip().lower()
    if word in ("yes", "true", "t", "y", "1"):
        return True
    if word in ("no", "false", "f", "n", "0"):
        return False
    import argparse

    raise argparse.ArgumentTypeError(f"expected true or false, got {value!r}")


def add_generation_flags(parser) -> None:
    defaults = GenerationSettings()
    for name, kind in TUNABLE.items():
        spellings = [f"--{name}"] + [f"--{alias}" for alias, ours in ALIASES.items() if ours == name]
        parser.add_argument(*spellings, dest=name, type=kind, default=getattr(defaults, name),
                            help=f"upstream's default: {getattr(defaults, name)}")
    for name in CHUNKING:
        parser.add_argument(f"--{name}", type=float, default=getattr(defaults, name),
                            help=f"long-text chunking, as upstream (default: {getattr(defaults, name)} s)")
    for name, what in SWITCHES.items():
        parser.add_argument(f"--{name}", type=true_or_false, metavar="BOOL",
                            help=f"{what}: true or false (default: {str(getattr(defaults, name)).lower()})")
    parser.add_argument("--no_denoise", action="store_true", help="leave out the <|denoise|> token when cloning "
                                                                 "(as --denoise false)")
    parser.add_argument("--no_postprocess", action="store_true", help="keep long silences in the output "
                                                                     "(as --postprocess_output false)")


def settings_from_flags(args) -> GenerationSettings:
    """The flags add_generation_flags defined, validated (a bad value is a one-line UserError)."""
    switches = {}
    for name in SWITCHES:
        given, negated = getattr(args, name), getattr(args, _NEGATED.get(name, ""), False)
        if given is not None and negated and given:
            raise UserError(f"--{name} true and --{_NEGATED[name]} contradict each other; give one")
        if given is not None or negated:
            switches[name] = bool(given) and not negated
    return GenerationSettings().replace(**{name: getattr(args, name) for name in (*TUNABLE, *CHUNKING)}, **switches)
