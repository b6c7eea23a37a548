"""Numerical equivalence of a build with upstream PyTorch, sub-model by sub-model (build-time: needs torch).

Every comparison feeds both sides the same inputs, including a padded CFG batch
(rows of different lengths, unconditional rows holding only the target).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from codes.checks.equiv_codec import codec_equivalence
from codes.checks.foreign import foreign_backbone_rows
from codes.checks.report import FP32_ABS_BOUND, Row, compare, format_table, probe_row
from codes.export.sources import source_of
from codes.runtime.contract import specs
from codes.runtime.contract.manifest import FORMAT, MANIFEST_NAME, RECIPE_SCHEMA, read_manifest, recogniser_folder
from codes.runtime.contract.probe import probe_bidirectional
from codes.runtime.contract.sessions import BackboneRunner, make_session, open_backbone, resolve_provider


def padded_cfg_batch(text_vocab: int, seed: int = 0, cond_lens=(23, 15), target_lens=(9, 6), ref_lens=(5, 0)):
    """Random prompt-shaped inputs laid out as upstream's CFG batch (2B rows, padded, 4-D mask)."""
    from codes.runtime.voices.prompt import build_cfg_batch

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


def backbone_equivalence(folder: Path, manifest, source: Path, provider: str = "cpu",
                         backbone: Path | None = None) -> list[Row]:
    """Compare the three backbone graphs of a build (or `backbone` in place of its own) with upstream
    on a padded CFG batch."""
    import torch

    from codes.export.checkpoint import load_omnivoice

    model = load_omnivoice(Path(source))
    precision = manifest.graph_precision
    llm_precision, embed_precision, heads_precision = (precision[k] for k in ("llm", "embeddings", "heads"))
    embed_session = make_session(manifest.path_of(specs.EMBEDDINGS.key), provider)
    backbone_path = Path(backbone) if backbone else manifest.path_of(specs.BACKBONE.key)
    backbone = open_backbone(backbone_path, provider)
    heads_session = make_session(manifest.path_of(specs.HEADS.key), provider)

    target_lens = [9, 6]
    batch = padded_cfg_batch(model.config.llm_config.vocab_size, target_lens=target_lens)
    input_ids, audio_mask, attention_mask, _ = batch
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
    rows.append(compare(specs.EMBEDDINGS.key, embed_precision, embeds, ref_embeds, embed_precision == "fp32"))
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
    rows += glue_rows(manifest, embed_session, backbone, heads_session, provider, batch, target_lens)
    rows += scoring_rows(manifest, ref_logits, provider)
    return rows


def glue_rows(manifest, embed_session, backbone: BackboneRunner, heads_session, provider: str, batch,
              target_lens: list[int]) -> list[Row]:
    """The graphs joined on the device by the build's glue graphs against the same graphs joined on the
    host: the heads' logits over the target cells. Equal but for int8 heads, whose activation scale
    spans the whole batch and so also sees the padding cells, which the two ways fill differently."""
    from codes.runtime.model.forward import StepForward

    glue = {key: make_session(manifest.folder / entry["filename"], provider)
            for key, entry in manifest.data.get("glue", {}).items()}
    if not glue:
        return []
    # The provider's name is the ONNX Runtime device the outputs are left on.
    forward = StepForward(embed_session, backbone, heads_session, glue, provider)
    if not forward.on_device:
        return [Row("step on the device (glue graphs)", "-", bound="glue must fit the graphs", passed=False,
                    note="the glue graphs do not take or give the backbone's types; rebuild with optimize.py")]
    on_device = forward.device_logits(batch.input_ids, batch, target_lens).numpy()
    on_host = forward.host_logits(batch.input_ids, batch, target_lens)
    num_items = len(target_lens)
    cells = [(row, slice(0, target_lens[row % num_items])) for row in range(2 * num_items)]
    ours = np.concatenate([on_device[row, :, cols].ravel() for row, cols in cells])
    ref = np.concatenate([on_host[row, :, cols].ravel() for row, cols in cells])
    heads_precision = manifest.graph_precision["heads"]
    return [compare("step on the device (glue graphs)", heads_precision, ours, ref, heads_precision != "int8")]


class Draws:
    """A NoiseSource handing out given uniform draws in order, so both sides see the same noise."""

    def __init__(self, draws: list[np.ndarray]):
        self.draws = list(draws)

    def uniform(self, shape: tuple[int, ...]) -> np.ndarray:
        draw = self.draws.pop(0)
        assert draw.shape == tuple(shape), (draw.shape, shape)
        return draw


def scoring_rows(manifest, logits: np.ndarray, provider: str = "cpu", seed: int = 0) -> list[Row]:
    """The cell-scoring graphs against upstream's decoding maths (the numpy twins, checked function by
    function against upstream) on the same logits and noise: tokens must be equal, scores within 1e-4."""
    from codes.runtime.contract.settings import GenerationSettings
    from codes.runtime.model.decoding import cell_scores

    graphs = manifest.data.get("scoring", {})
    rows = []
    num_items = logits.shape[0] // 2
    for spec, class_temperature in ((specs.SCORING, 0.0), (specs.SCORING_SAMPLED, 0.8)):
        if spec.key not in graphs:
            continue
        settings = GenerationSettings(class_temperature=class_temperature)
        rng = np.random.default_rng(seed)
        position = rng.random((num_items, *logits.shape[1:3]), dtype=np.float32)
        feeds = {"logits": logits, "position_uniform": position}
        for name in ("guidance_scale", "layer_penalty_factor", "position_temperature"):
            feeds[name] = np.full(num_items, getattr(settings, name), np.float32)
        if class_temperature:
            feeds["class_uniform"] = rng.random(logits[:num_items].shape, dtype=np.float32)
            feeds["class_temperature"] = np.full(num_items, class_temperature, np.float32)
        tokens, scores = make_session(manifest.folder / graphs[spec.key]["filename"], provider).run(None, feeds)
        ref_tokens, ref_scores = [], []
        for item in range(num_items):
            draws = ([feeds["class_uniform"][item]] if class_temperature else []) + [position[item]]
            item_tokens, item_scores = cell_scores(logits[item], logits[num_items + item], settings, Draws(draws))
            ref_tokens.append(item_tokens)
            ref_scores.append(item_scores)
        row = compare(f"{spec.key} (upstream's maths)", "fp32", scores, np.stack(ref_scores), True)
        row.argmax_agree = float((tokens == np.stack(ref_tokens)).mean())
        row.passed = row.passed and row.argmax_agree == 1.0
        row.bound += ", tokens equal"
        rows.append(row)
    return rows


def manifest_schema(folder: Path) -> str | None:
    """FORMAT for our builds, RECIPE_SCHEMA for a folder in the recipe's schema, None for anything else.

    A file of the same name does not make a build ours or the recipe's (docs/DESIGN.md §foreign-layouts).
    """
    try:
        data = json.loads((Path(folder) / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if data.get("format") == FORMAT:
        return FORMAT
    return RECIPE_SCHEMA if "format" not in data and isinstance(data.get("backbone"), dict) else None


def run_equivalence(folder: Path, source: str | None, provider: str | None = None,
                    higgs_dir: Path | None = None, backbone: Path | None = None, asr_dir: Path | None = None,
                    asr_source: str | None = None) -> tuple[list[Row], str]:
    """Rows for every graph of the build in `folder`, ours or in the recipe's schema (with `backbone` in
    place of its own, if given), of the codec in `higgs_dir` or the build's own, and of the recogniser in
    `asr_dir` or the build's own, if there is one."""
    from codes.checks.equiv_asr import recogniser_equivalence, whisper_source

    folder = Path(folder)
    if manifest_schema(folder) is None:
        rows = foreign_backbone_rows(folder, provider or "cpu")
        return rows, f"{folder}: not an omnivoice-onnx build; probing its backbone only\n" + format_table(rows)
    manifest = read_manifest(folder)
    provider = resolve_provider(provider, manifest.data.get("execution_provider"))
    codec_holder = read_manifest(higgs_dir) if higgs_dir is not None else manifest
    has_codec = codec_holder.is_codec or codec_holder.higgs
    # A recogniser alone was built from no OmniVoice checkpoint.
    source_path = source_of(manifest, source) if manifest.sub_models or has_codec else None
    rows = []
    if manifest.sub_models:
        rows += backbone_equivalence(folder, manifest, source_path, provider, backbone)
    if has_codec:
        codec_folder, section = codec_holder.codec()
        codec_source = source_path if higgs_dir is None else source_of(read_manifest(codec_folder), source)
        rows += codec_equivalence(codec_folder, section, codec_source / specs.HIGGS_DIR)
    if asr_dir is not None or manifest.asr:
        asr_folder = recogniser_folder(asr_dir) if asr_dir is not None else manifest.recogniser()
        rows += recogniser_equivalence(asr_folder, whisper_source(asr_folder, asr_source), provider)
    title = f"{folder} ({manifest.data.get('profile') or manifest.schema}) vs upstream {source_path or 'Whisper'}"
    return rows, title + "\n" + format_table(rows)
