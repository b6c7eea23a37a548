"""How closely a build's decisions follow a reference's: teacher-forced fidelity over a fixed prompt set.

The reference (upstream PyTorch on the build's checkpoint, or another build, usually `cpu_fp32`)
decodes a fixed set of prompts greedily: several languages, voice design, and a clone of the
first prompt's own codes. At every step the candidate sees exactly the reference's input, so its
errors never compound, and each still-masked cell is compared three ways:
- argmax agreement of the classifier-free guided log-probs (the token the decoder would pick);
- cosine of the conditional logits;
- KL(reference || candidate) of the guided distributions, in nats.
The first step's agreement is the figure quantization hurts most (every cell is open, nothing is
revealed yet), and the one optimize.py prints for every quantized build.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from codes.common.errors import UserError
from codes.export.calibration import decode_prompt_set, greedy_settings, torch_target_logits
from codes.runtime.contract.specs import AUDIO_MASK_ID, CODEBOOK_SIZE
from codes.runtime.model.decoding import guided_log_probs

# Held out from the build's calibration prompts (codes/export/calibration.py): fidelity is measured
# on text the smoothing scales were not fitted to.
FIDELITY_PROMPTS = (  # (text, language, instruct)
    ("The lighthouse keeper climbed one hundred and twelve steps to light the lamp.", "en", None),
    ("今天的会议推迟到下午三点，请大家准时参加。", "zh", "female, low pitch"),
    ("Guten Abend, der Zug nach Berlin fährt heute von Gleis sieben.", "de", "male"),
    ("Merci beaucoup pour votre patience, nous arrivons bientôt.", "fr", None),
    ("明日の天気は晴れのち曇りでしょう。", "ja", "female"),
)
CLONE_TEXT = "And this sentence is spoken in the voice of the first one."
DEFAULT_STEPS = 8
GUIDANCE_SCALE = greedy_settings(DEFAULT_STEPS).guidance_scale  # the default's: the guided choice decoding makes


@dataclass
class Tally:
    """Sums over compared cells."""

    cells: int = 0
    agree: int = 0
    cosine: float = 0.0
    kl: float = 0.0

    def add(self, other: Tally) -> None:
        self.cells += other.cells
        self.agree += other.agree
        self.cosine += other.cosine
        self.kl += other.kl

    def figures(self) -> dict:
        n = max(self.cells, 1)
        return {"cells": self.cells, "agreement": self.agree / n, "cosine": self.cosine / n, "kl": self.kl / n}


def cell_tally(ref: tuple[np.ndarray, np.ndarray], cand: tuple[np.ndarray, np.ndarray], cells: np.ndarray,
               guidance_scale: float) -> Tally:
    """One item's (cond, uncond) target logits [8, T, V] from both sides, compared on `cells` [8, T]."""
    if not cells.any():
        return Tally()
    # MASK is never predicted (its log-prob is -inf on both sides): it is left out of every figure.
    ref_lp = guided_log_probs(ref[0], ref[1], guidance_scale)[cells][:, :CODEBOOK_SIZE]
    cand_lp = guided_log_probs(cand[0], cand[1], guidance_scale)[cells][:, :CODEBOOK_SIZE]
    agree = int((ref_lp.argmax(-1) == cand_lp.argmax(-1)).sum())
    # Clipped at 0: a cell whose distributions match to rounding comes out a hair below.
    kl = float(np.maximum((np.exp(ref_lp) * (ref_lp - cand_lp)).sum(-1), 0).astype(np.float64).sum())
    a = ref[0][cells][:, :CODEBOOK_SIZE].astype(np.float64)
    b = cand[0][cells][:, :CODEBOOK_SIZE].astype(np.float64)
    cosine = float(((a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1) + 1e-30)).sum())
    return Tally(int(cells.sum()), agree, cosine, kl)


@dataclass
class Fidelity:
    reference: str
    prompts: int
    tallies: list[Tally] = field(default_factory=list)  # one a step

    @property
    def steps(self) -> list[dict]:
        return [t.figures() for t in self.tallies]

    def summary(self) -> dict:
        total = Tally()
        for tally in self.tallies:
            total.add(tally)
        whole = total.figures()
        return {"reference": self.reference, "prompts": self.prompts, "num_steps": len(self.tallies),
                "first_step_agreement": round(self.steps[0]["agreement"], 4),
                "agreement": round(whole["agreement"], 4), "cosine": round(whole["cosine"], 5),
                "kl": round(whole["kl"], 5)}

    def one_line(self) -> str:
        s = self.summary()
        return (f"fidelity vs {s['reference']}: argmax agreement {100 * s['first_step_agreement']:.1f}% at the first "
                f"step, {100 * s['agreement']:.1f}% over {s['num_steps']} steps; logit cosine {s['cosine']:.4f}; "
                f"KL {s['kl']:.4f} nats a cell ({s['prompts']} prompts, teacher-forced)")

    def table(self) -> str:
        lines = ["| step | cells | argmax agreement | logit cosine | KL (nats/cell) |", "|---|---|---|---|---|"]
        lines += [f"| {i + 1} | {s['cells']} | {100 * s['agreement']:.2f}% | {s['cosine']:.5f} | {s['kl']:.5f} |"
                  for i, s in enumerate(self.steps)]
        return "\n".join(lines)


def measure(tokenizer, candidate_fn, reference_fn, reference: str, num_steps: int = DEFAULT_STEPS) -> Fidelity:
    """Teacher-forced fidelity of `candidate_fn` against `reference_fn` (TargetLogitsFns) over FIDELITY_PROMPTS
    and a clone of the first prompt's reference codes: the reference drives, both see every step's input."""
    tallies = [Tally() for _ in range(num_steps)]
    calls = [0]

    def driven(input_ids, batch, target_lens):
        ref = reference_fn(input_ids, batch, target_lens)
        cand = candidate_fn(input_ids, batch, target_lens)
        tally = tallies[calls[0] % num_steps]  # each prompt batch runs num_steps forwards
        for item, (r, c) in enumerate(zip(ref, cand)):
            cond_len, t = batch.cond_lens[item], target_lens[item]
            tally.add(cell_tally(r, c, input_ids[item, :, cond_len - t:cond_len] == AUDIO_MASK_ID, GUIDANCE_SCALE))
        calls[0] += 1
        return ref

    decode_prompt_set(tokenizer, FIDELITY_PROMPTS, CLONE_TEXT, driven, num_steps)
    return Fidelity(reference, len(FIDELITY_PROMPTS) + 1, tallies)


def upstream_logits(checkpoint: Path):
    """Upstream PyTorch (fp32, CPU) on `checkpoint`, as a TargetLogitsFn."""
    from codes.export.checkpoint import load_omnivoice

    return torch_target_logits(load_omnivoice(Path(checkpoint)))


def run_fidelity(model_dir: Path, reference: str = "upstream", source: str | None = None,
                 num_steps: int = DEFAULT_STEPS, threads: int | None = None, provider: str | None = None) -> Fidelity:
    """eval.py --mode fidelity: the build in `model_dir` against upstream (its checkpoint, or `source`)
    or against another build's folder."""
    from codes.export.sources import source_of
    from codes.runtime.contract.manifest import read_manifest
    from codes.runtime.synthesis import OmniVoiceOnnx

    if num_steps < 1:
        raise UserError(f"--num_steps must be at least 1, got {num_steps}")
    engine = OmniVoiceOnnx(model_dir, provider=provider, threads=threads, step="numpy")
    if reference == "upstream":
        path = source_of(engine.manifest, source)
        return measure(engine.tokenizer, engine.target_logits, upstream_logits(path), f"upstream fp32 ({path.name})",
                       num_steps)
    folder = Path(reference)
    if not (folder / "omnivoice_manifest.json").is_file():
        raise UserError(f"--reference {reference}: not a build folder; pass upstream or a build such as a cpu_fp32 one")
    other = OmniVoiceOnnx(folder, provider=provider, threads=threads, step="numpy")
    if other.manifest.data.get("model") != engine.manifest.data.get("model"):
        raise UserError(f"--reference {reference} is a build of another model shape; build the same checkpoint "
                        "with --device cpu_fp32")
    label = read_manifest(folder).data.get("profile") or folder.name
    return measure(engine.tokenizer, engine.target_logits, other.target_logits, f"{label} build ({folder.name})",
                   num_steps)


def build_fidelity(folder: Path, checkpoint: Path, log=print) -> dict:
    """optimize.py's report for a quantized build staged in `folder`: against upstream fp32 on `checkpoint`."""
    from codes.runtime.synthesis import OmniVoiceOnnx

    from codes.common.isa import int8_weight_levels, isa_names

    engine = OmniVoiceOnnx(folder, step="numpy")
    fidelity = measure(engine.tokenizer, engine.target_logits, upstream_logits(checkpoint), "upstream fp32")
    log(fidelity.one_line())
    # the host it ran on: an x86 CPU without VNNI or AMX runs full-range int8 weights re-ranged to 7 bits, and
    # one with AVX-512 VNNI and BF16 the fused attention kernel
    host = {"isa": isa_names(), "int8_weight_levels": int8_weight_levels(), "kernels": engine.kernels}
    return {**fidelity.summary(), "host": host, "steps": fidelity.steps}
