"""Numerical equivalence of a build with upstream PyTorch, sub-model by sub-model (build-time: needs torch).

Every comparison feeds both sides the same inputs, including a padded CFG batch
(rows of different lengths, unconditional rows holding only the target).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from codes.runtime import specs
from codes.checks.probe import ProbeResult

# fp32 hidden states must match upstream to 1e-4 (issue #2); lower precisions are reported.
FP32_ABS_BOUND = 1e-4


@dataclass
class Row:
    check: str
    precision: str
    max_abs: float | None = None
    rel_err: float | None = None
    argmax_agree: float | None = None
    bound: str = "reported"
    passed: bool = True
    note: str = ""


def _rel(diff: np.ndarray, ref: np.ndarray) -> float:
    return float(np.linalg.norm(diff) / max(np.linalg.norm(ref), 1e-12))


def compare(check: str, precision: str, ours: np.ndarray, ref: np.ndarray, bounded: bool,
            argmax_axis: int | None = None, abs_bound: float = FP32_ABS_BOUND) -> Row:
    ours, ref = np.asarray(ours, np.float32), np.asarray(ref, np.float32)
    diff = ours - ref
    row = Row(check, precision, float(np.abs(diff).max()), _rel(diff, ref))
    if argmax_axis is not None:
        row.argmax_agree = float((ours.argmax(argmax_axis) == ref.argmax(argmax_axis)).mean())
    if bounded:
        row.bound = f"max abs <= {abs_bound:g}"
        row.passed = row.max_abs <= abs_bound
    return row


def probe_row(result: ProbeResult, check: str = "bidirectionality probe") -> Row:
    return Row(check, "-", max_abs=result.max_change_before_last, bound="earlier positions must move",
               passed=result.bidirectional, note=result.describe())


def padded_cfg_batch(text_vocab: int, seed: int = 0, cond_lens=(23, 15), target_lens=(9, 6), ref_lens=(5, 0)):
    """Random prompt-shaped inputs laid out as upstream's CFG batch (2B rows, padded, 4-D mask)."""
    from codes.runtime.prompt import build_cfg_batch

    rng = np.random.default_rng(seed)
    items = []
    for cond_len, target_len, ref_len in zip(cond_lens, target_lens, ref_lens):
        text_len = cond_len - target_len - ref_len
        input_ids = np.empty((specs.NUM_CODEBOOKS, cond_len), dtype=np.int64)
        input_ids[:, :text_len] = rng.integers(0, text_vocab, text_len)  # text repeats over codebooks
        input_ids[:, text_len:] = rng.integers(0, specs.CODEBOOK_SIZE, (specs.NUM_CODEBOOKS, cond_len - text_len))
        input_ids[:, cond_len - target_len:] = specs.AUDIO_MASK_ID
        # a few revealed target cells, as mid-decoding
        revealed = rng.random((specs.NUM_CODEBOOKS, target_len)) < 0.3
        input_ids[:, cond_len - target_len:][revealed] = rng.integers(0, specs.CODEBOOK_SIZE, revealed.sum())
        audio_mask = np.zeros(cond_len, dtype=bool)
        audio_mask[text_len:] = True
        items.append((input_ids, audio_mask))
    return build_cfg_batch(items, list(target_lens))


def backbone_equivalence(folder: Path, manifest, source: Path, provider: str = "cpu") -> list[Row]:
    """Compare the three backbone graphs of an omnivoice-onnx build with upstream on a padded CFG batch."""
    import torch

    from codes.export.checkpoint import load_omnivoice
    from codes.checks.probe import probe_bidirectional
    from codes.runtime.sessions import BackboneRunner, make_session

    model = load_omnivoice(Path(source))
    precision = manifest.data.get("precision", {})
    llm_precision, embed_precision, heads_precision = (precision.get(k, "?") for k in ("llm", "embeddings", "heads"))
    embed_session = make_session(manifest.path_of("audio_embeddings_encoder"), provider)
    backbone = BackboneRunner(make_session(manifest.path_of("llm_decoder"), provider))
    heads_session = make_session(manifest.path_of("audio_heads_decoder"), provider)

    input_ids, audio_mask, attention_mask, _ = padded_cfg_batch(model.config.llm_config.vocab_size)
    with torch.no_grad():
        t_ids, t_audio, t_attn = map(torch.from_numpy, (input_ids, audio_mask, attention_mask))
        ref_embeds = model._prepare_embed_inputs(t_ids, t_audio)
        ref_hidden = model.llm(inputs_embeds=ref_embeds, attention_mask=t_attn, use_cache=False).last_hidden_state
        ref_logits = model(input_ids=t_ids, audio_mask=t_audio, attention_mask=t_attn).logits
        ref_embeds, ref_hidden, ref_logits = (t.float().numpy() for t in (ref_embeds, ref_hidden, ref_logits))

    # Padding in conditional rows attends to nothing: undefined on both sides and never read.
    defined = attention_mask.any(axis=(1, 3))  # [2B, S]
    rows = []
    embeds = embed_session.run(None, {"input_ids": input_ids, "audio_mask": audio_mask})[0]
    rows.append(compare("audio_embeddings_encoder", embed_precision, embeds, ref_embeds, embed_precision == "fp32"))
    hidden = backbone(ref_embeds, attention_mask)
    rows.append(compare("llm_decoder hidden (padded CFG batch)", llm_precision, hidden[defined], ref_hidden[defined],
                        llm_precision == "fp32"))
    logits = heads_session.run(None, {"hidden_states": ref_hidden.astype(np.float32)})[0]
    rows.append(compare("audio_heads_decoder logits", heads_precision, logits, ref_logits, heads_precision == "fp32",
                        argmax_axis=-1))
    chained_hidden = backbone(embeds, attention_mask)
    chained = heads_session.run(None, {"hidden_states": chained_hidden})[0]
    all_fp32 = llm_precision == embed_precision == heads_precision == "fp32"
    on_defined = defined[:, None, :].repeat(specs.NUM_CODEBOOKS, axis=1)  # [2B, 8, S]
    rows.append(compare("end to end logits (3 graphs)", f"{embed_precision}/{llm_precision}/{heads_precision}",
                        chained[on_defined], ref_logits[on_defined], all_fp32, argmax_axis=-1,
                        abs_bound=10 * FP32_ABS_BOUND))
    rows.append(probe_row(probe_bidirectional(backbone)))
    return rows


def format_table(rows: list[Row]) -> str:
    def num(value, fmt):
        return "-" if value is None else format(value, fmt)

    header = f"{'check':<42} {'precision':<14} {'max abs':>10} {'rel err':>10} {'argmax':>8}  {'bound':<28} result"
    lines = [header, "-" * len(header)]
    for r in rows:
        argmax = "-" if r.argmax_agree is None else f"{100 * r.argmax_agree:.2f}%"
        result = "PASS" if r.passed else "FAIL"
        lines.append(f"{r.check:<42} {r.precision:<14} {num(r.max_abs, '10.3g')} {num(r.rel_err, '10.3g')} "
                     f"{argmax:>8}  {r.bound:<28} {result}")
    notes = [f"  {r.check}: {r.note}" for r in rows if r.note]
    return "\n".join(lines + notes)


FOREIGN_BACKBONE_NAMES = ("llm_decoder.onnx", "llm_backbone_fp32.onnx", "llm_backbone.onnx", "model.onnx")


def _head_dim_from_graph(path: Path) -> int | None:
    """genai graphs keep rotary tables as cos_cache [max_pos, head_dim/2] (full rotary in Qwen3)."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)
    for tensor in model.graph.initializer:
        if tensor.name == "cos_cache":
            return 2 * tensor.dims[1]
    return None


def foreign_backbone_rows(folder: Path, provider: str = "cpu") -> list[Row]:
    """A folder that is not ours (no omnivoice-onnx manifest): find its backbone and probe it."""
    from codes.common.errors import UserError
    from codes.runtime.sessions import BackboneRunner, genai_head_dim, make_session
    from codes.checks.probe import probe_bidirectional

    path = next((Path(folder) / n for n in FOREIGN_BACKBONE_NAMES if (Path(folder) / n).is_file()), None)
    if path is None:
        raise UserError(f"{folder} has no omnivoice-onnx manifest and no backbone graph named "
                        f"{' / '.join(FOREIGN_BACKBONE_NAMES)}; pass a build folder")
    head_dim = genai_head_dim(folder) or _head_dim_from_graph(path)
    runner = BackboneRunner(make_session(path, provider), head_dim=head_dim)
    return [probe_row(probe_bidirectional(runner), check=f"bidirectionality probe ({path.name})")]


def source_of(manifest, source: str | None) -> Path:
    """--source, else the checkpoint the manifest names (generated ones are regenerated on demand)."""
    from codes.export.checkpoint import resolve_checkpoint
    from codes.common.errors import UserError

    if source:
        return resolve_checkpoint(source, need_backbone=False).path
    recorded = manifest.data.get("source", {})
    if recorded.get("kind") in ("tiny-random", "full-random"):
        from codes.export.generated import generated_checkpoint

        return generated_checkpoint(recorded["kind"], seed=recorded.get("seed", 0)).path
    path = recorded.get("path")
    if path and Path(path).is_dir():
        return Path(path)
    raise UserError(f"the checkpoint this build came from ({path or recorded}) is not here; pass it with --source DIR")


def run_equivalence(folder: Path, source: str | None, provider: str = "cpu") -> tuple[list[Row], str]:
    from codes.runtime.manifest import MANIFEST_NAME, read_manifest

    folder = Path(folder)
    if not (folder / MANIFEST_NAME).is_file() or '"omnivoice-onnx"' not in (folder / MANIFEST_NAME).read_text():
        rows = foreign_backbone_rows(folder, provider)
        return rows, f"{folder}: not an omnivoice-onnx build; probing its backbone only\n" + format_table(rows)
    manifest = read_manifest(folder)
    source_path = source_of(manifest, source)
    rows = []
    if manifest.sub_models:
        rows += backbone_equivalence(folder, manifest, source_path, provider)
    if manifest.higgs:
        from codes.checks.equiv_codec import codec_equivalence

        rows += codec_equivalence(manifest.higgs_folder(), manifest.higgs, source_path / specs.HIGGS_DIR)
    title = f"{folder} ({manifest.data.get('profile')}) vs upstream {source_path}"
    return rows, title + "\n" + format_table(rows)
