"""optimize.py: every profile builds, the manifest is the contract, bad input fails cleanly."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from codes.common.errors import UserError
from codes.common.isa import int8_weight_levels, isa_names, native_kernel_lanes
from codes.export.manifest_write import hash_files
from codes.runtime.contract.manifest import MANIFEST_NAME, read_manifest
from codes.runtime.contract.native_kernels import kernels_label
from helpers.scripts import last_error_line, run_main, run_script

PROFILES = ("cpu_fp32", "cpu", "cpu_fp16", "gpu")


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_builds_a_valid_bidirectional_folder(builds, profile):
    folder = builds.get(profile)
    manifest = read_manifest(folder)  # verifies every sha256
    data = manifest.data
    assert data["profile"] == profile
    assert data["attention"] == "bidirectional"
    assert data["llm_build"] == "genai"
    assert data["decoding_defaults"]["num_steps"] == 32
    assert data["audio"]["mask_id"] == 1024 and data["audio"]["codebook_weights"] == [8, 8, 6, 6, 4, 4, 2, 2]
    assert data["tokenizer"]["special_tokens"]["<|text_start|>"] == 151674
    for key in ("audio_embeddings_encoder", "llm_decoder", "audio_heads_decoder"):
        path = manifest.path_of(key)
        if manifest.sub_models[key]["built_with"] != "genai":
            onnx.checker.check_model(str(path))
        # The genai graph uses ORT ops in the default domain (SimplifiedLayerNormalization) that the
        # ONNX checker does not know; ONNX Runtime loading it is the check that means something.
        ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        assert manifest.sub_models[key]["precision"] in ("fp32", "fp16", "int4")
    # The decoding step's maths is built in every profile, always fp32.
    assert {key: entry["precision"] for key, entry in data["scoring"].items()} == {
        "cell_scoring": "fp32", "cell_scoring_sampled": "fp32"}
    for entry in data["scoring"].values():
        ort.InferenceSession(str(folder / entry["filename"]), providers=["CPUExecutionProvider"])
    llm_inputs = {i["name"]: i for i in manifest.sub_models["llm_decoder"]["inputs"]}
    assert llm_inputs["attention_mask"]["dtype"] == "bool" and len(llm_inputs["attention_mask"]["shape"]) == 4
    # Portable: nothing in the manifest points outside the folder.
    assert str(folder) not in json.dumps({k: v for k, v in data.items() if k != "source"})


def test_gpu_profile_is_fp16_for_cuda(builds):
    data = read_manifest(builds.get("gpu")).data
    assert data["execution_provider"] == "CUDAExecutionProvider"
    assert data["precision"] == "fp16" and data["graph_precision"] == {"llm": "fp16", "embeddings": "fp16", "heads": "fp16"}
    llm_inputs = {i["name"]: i for i in data["backbone"]["llm_decoder"]["inputs"]}
    assert llm_inputs["inputs_embeds"]["dtype"] == "float16"
    if "CUDAExecutionProvider" in ort.get_available_providers():  # where a GPU exists, run it there too
        result = run_main("eval.py", "--mode", "equiv", "--model_dir", builds.get("gpu"), "--provider", "cuda")
        assert result.returncode == 0, result.stdout + result.stderr


def test_int4_profile_quantizes_weights(builds):
    sizes = {p: read_manifest(builds.get(p)).sub_models for p in ("cpu_fp32", "cpu")}
    for key in ("audio_embeddings_encoder", "audio_heads_decoder"):
        assert sizes["cpu"][key]["size_bytes"] < 0.5 * sizes["cpu_fp32"][key]["size_bytes"], key

    def ops(name):
        return {n.op_type for n in onnx.load(str(builds.get("cpu") / name)).graph.node}

    assert "GatherBlockQuantized" in ops("audio_embeddings_encoder.onnx")
    assert "MatMulNBits" in ops("audio_heads_decoder.onnx")
    # The tiny backbone's size is mostly its rotary tables, so check the kernels instead.
    assert "MatMulNBits" in ops("llm_decoder.onnx") and "MatMul" not in ops("llm_decoder.onnx")


def test_int8_profile_runs_integer_kernels_and_stays_bidirectional(builds):
    folder = builds.get("cpu_int8")
    data = read_manifest(folder).data
    assert data["precision"] == "int8" and data["graph_precision"] == {"llm": "int8", "embeddings": "fp16", "heads": "fp32"}
    assert data["quantization"]["int8"]["llm"]["activations"].startswith("int8, a scale per row")
    assert data["quantization"]["calibration"]["prompts"] == 7 and data["quantization"]["calibration"]["positions"] > 0
    fidelity = data["fidelity"]
    assert fidelity["measured"] and fidelity["reference"] == "upstream fp32" and 0 < fidelity["first_step_agreement"] <= 1
    assert len(fidelity["steps"]) == fidelity["num_steps"] == 8
    # the host it was measured on, and the weight range its kernels ran (full range, or re-ranged to 7 bits)
    assert fidelity["host"]["int8_weight_levels"] == int8_weight_levels() and fidelity["host"]["isa"] == isa_names()
    assert fidelity["host"]["kernels"] == kernels_label(native_kernel_lanes())
    assert data["quantization"]["int8"]["llm"]["weight_levels"] == 127

    def ops(name):
        return [n.op_type for n in onnx.load(str(folder / name)).graph.node]

    backbone = onnx.load(str(folder / "llm_decoder.onnx")).graph.node
    # Every linear layer on the integer kernels (genai fuses q/k/v): an fp32 MatMul only beside one, reading
    # the outlier channels its input gathers.
    assert [n.op_type for n in backbone].count("MatMulIntegerToFloat") == 5 * data["model"]["num_hidden_layers"]
    gathered = {n.output[0] for n in backbone if n.op_type == "Gather"}
    assert all(n.input[0] in gathered for n in backbone if n.op_type == "MatMul")
    assert ops("audio_heads_decoder.onnx").count("MatMul") == 1 and "MatMulIntegerToFloat" not in ops("audio_heads_decoder.onnx")
    result = run_main("eval.py", "--mode", "equiv", "--model_dir", folder)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "bidirectional" in result.stdout


@pytest.mark.parametrize("profile", ["cpu_int8", "cpu_fp16"])
def test_fp16_embedding_tables_are_looked_up_in_place(builds, profile, tmp_path):
    """ORT's CPU provider must read rows from the fp16 tables, not cast whole tables to fp32 at load."""
    graph = builds.get(profile) / "audio_embeddings_encoder.onnx"
    tables = [t for t in onnx.load(str(graph)).graph.initializer if t.data_type == onnx.TensorProto.FLOAT16]
    assert len(tables) == 2  # text and audio embeddings
    options = ort.SessionOptions()
    options.optimized_model_filepath = str(tmp_path / "as_run.onnx")
    options.add_session_config_entry("session.optimized_model_external_initializers_file_name", "as_run.data")
    ort.InferenceSession(str(graph), options, providers=["CPUExecutionProvider"])
    as_run = onnx.load(str(tmp_path / "as_run.onnx"), load_external_data=False)
    readers = {t.name: [n.op_type for n in as_run.graph.node if t.name in n.input] for t in tables}
    assert readers == {t.name: ["Gather"] for t in tables}


def test_weights_live_in_external_data_files(builds):
    """ONNX Runtime memory-maps external data; weights inside the protobuf would sit in the heap twice."""
    folder = builds.get("cpu_int8")
    for key, entry in read_manifest(folder).sub_models.items():
        graph, data_file = folder / entry["filename"], folder / f"{entry['filename']}.data"
        assert entry["external_data"] == [data_file.name], key
        assert data_file.stat().st_size > 10 * graph.stat().st_size, key


@pytest.mark.parametrize("extra", [(), ("--llm-export", "torch")], ids=["genai", "torch"])
def test_fp32_build_is_equivalent_to_upstream(builds, extra):
    result = run_main("eval.py", "--mode", "equiv", "--model_dir", builds.get("cpu_fp32", *extra))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAIL" not in result.stdout
    assert "llm_decoder hidden (padded CFG batch)" in result.stdout and "bidirectional:" in result.stdout
    assert "cell_scoring (upstream's maths)" in result.stdout and "cell_scoring_sampled (upstream's maths)" in result.stdout


def test_int4_build_is_reported_with_argmax_agreement(builds):
    result = run_main("eval.py", "--mode", "equiv", "--model_dir", builds.get("cpu"))
    assert result.returncode == 0, result.stdout + result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("end to end logits"))
    assert "int4/int4" in row and "%" in row


def test_probe_fails_on_an_unpatched_genai_build(tiny_checkpoint, tmp_path):
    from codes.export.checkpoint import load_omnivoice
    from codes.export.llm_genai import build_genai_causal, write_standalone_llm

    hf_dir = write_standalone_llm(load_omnivoice(tiny_checkpoint.path), tmp_path / "hf")
    causal = build_genai_causal(hf_dir, tmp_path / "foreign", "fp32", "cpu")
    causal.rename(causal.with_name("llm_decoder.onnx"))
    result = run_main("eval.py", "--mode", "equiv", "--model_dir", tmp_path / "foreign")
    assert result.returncode == 1
    assert "CAUSAL" in result.stdout and "FAIL" in result.stdout
    # A manifest of someone else's format beside it does not stop the probe.
    (tmp_path / "foreign" / "omnivoice_manifest.json").write_text('{"format": "someone-else"}')
    result = run_main("eval.py", "--mode", "equiv", "--model_dir", tmp_path / "foreign")
    assert result.returncode == 1 and "CAUSAL" in result.stdout


def test_probe_passes_on_our_backbone_graph(builds):
    from codes.runtime.contract.probe import probe_bidirectional
    from codes.runtime.contract.sessions import BackboneRunner, make_session

    result = probe_bidirectional(BackboneRunner(make_session(builds.get("cpu") / "llm_decoder.onnx")))
    assert result.bidirectional and result.max_change_before_last > 1e-3


def test_manifest_hashes_cover_every_file_and_catch_changes(builds, tmp_path):
    folder = tmp_path / "copy"
    shutil.copytree(builds.get("cpu_fp32"), folder)
    manifest = read_manifest(folder)
    on_disk = {p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file()} - {MANIFEST_NAME}
    assert set(manifest.data["files"]) == on_disk
    assert hash_files(folder) == manifest.data["files"]
    with open(folder / "audio_heads_decoder.onnx", "r+b") as f:
        f.seek(-8, 2)
        f.write(b"\x00" * 8)
    with pytest.raises(UserError, match="sha256"):
        read_manifest(folder)


def upstream_checkpoint(folder: Path, tiny_checkpoint, seed: int, **llm_sizes) -> Path:
    """A checkpoint written by upstream's own classes (default init), with the tiny codec."""
    import torch
    from omnivoice.models.omnivoice import OmniVoice, OmniVoiceConfig
    from transformers import Qwen3Config

    from codes.export.tokenizer_build import write_tokenizer_files

    torch.manual_seed(seed)
    llm = Qwen3Config(num_hidden_layers=1, intermediate_size=64, vocab_size=151676, **llm_sizes)
    OmniVoice(OmniVoiceConfig(llm_config=llm.to_dict())).save_pretrained(str(folder))
    write_tokenizer_files(folder)
    shutil.copytree(tiny_checkpoint.higgs_path, folder / "audio_tokenizer")
    return folder


def test_checkpoint_saved_by_upstream_save_pretrained_builds(tiny_checkpoint, tmp_path):
    """A checkpoint written by upstream's own classes (default init, other sizes) builds and matches."""
    ckpt = upstream_checkpoint(tmp_path / "upstream_ckpt", tiny_checkpoint, seed=1, hidden_size=32,
                               num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    out = tmp_path / "build"
    run_main("optimize.py", "--model", ckpt, "--device", "cpu_fp32", "--output", out, check=True)
    assert read_manifest(out).data["source"]["path"] == str(ckpt.resolve())
    result = run_main("eval.py", "--mode", "equiv", "--model_dir", out)
    assert result.returncode == 0, result.stdout + result.stderr


def test_cached_hub_id_resolves_offline(tiny_checkpoint, tmp_path):
    """A hub id is looked up in the local Hugging Face cache only."""
    snapshot = tmp_path / "hub" / "models--k2-fsa--OmniVoice" / "snapshots" / "0123abcd"
    shutil.copytree(tiny_checkpoint.path, snapshot)
    (tmp_path / "hub" / "models--k2-fsa--OmniVoice" / "refs").mkdir()
    (tmp_path / "hub" / "models--k2-fsa--OmniVoice" / "refs" / "main").write_text("0123abcd")
    code = ("from codes.export.checkpoint import resolve_checkpoint; c = resolve_checkpoint('k2-fsa/OmniVoice'); "
            "print(c.path, c.identity['kind'], c.identity['revision'])")
    import subprocess
    import sys

    from helpers.scripts import ROOT

    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**__import__("os").environ, "HF_HUB_CACHE": str(tmp_path / "hub")})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(snapshot), "hub", "0123abcd"]


# --- bad input: one line, non-zero exit, nothing half-written -----------------------------------


def test_uncached_hub_id_says_to_pass_a_folder(tmp_path):
    result = run_script("optimize.py", "--model", "k2-fsa/OmniVoice", "--output", tmp_path / "out",
                        env={"HF_HUB_CACHE": str(tmp_path / "empty-cache")})
    assert result.returncode == 2
    assert "local Hugging Face cache" in last_error_line(result) and "--model DIR" in last_error_line(result)
    assert not (tmp_path / "out").exists()


def test_incomplete_checkpoint_names_the_missing_file(tiny_checkpoint, tmp_path):
    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint.path, ckpt)
    (ckpt / "model.safetensors").unlink()
    result = run_script("optimize.py", "--model", ckpt, "--output", tmp_path / "out")
    assert result.returncode == 2
    assert last_error_line(result).startswith("error:") and "model.safetensors" in last_error_line(result)
    assert not (tmp_path / "out").exists()


def test_missing_checkpoint_folder_and_unknown_profile(tmp_path):
    result = run_script("optimize.py", "--model", tmp_path / "nowhere", "--output", tmp_path / "out")
    assert result.returncode == 2 and "no such folder" in last_error_line(result)
    result = run_script("optimize.py", "--model", "tiny-random", "--device", "tpu", "--output", tmp_path / "out")
    assert result.returncode == 2 and "unknown profile" in last_error_line(result) and "cpu_fp32" in last_error_line(result)


def test_foreign_files_need_overwrite_and_overwrite_touches_nothing_else(builds, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "llm_decoder.onnx").write_bytes(b"not ours")
    (out / "NOTES.txt").write_text("mine")
    (out / "nested").mkdir()
    (out / "nested" / "keep.bin").write_bytes(b"\x01")
    result = run_script("optimize.py", "--model", "tiny-random", "--device", "cpu_fp32", "--output", out)
    assert result.returncode == 2
    assert "llm_decoder.onnx" in last_error_line(result) and "--overwrite" in last_error_line(result)
    assert sorted(p.name for p in out.iterdir()) == ["NOTES.txt", "llm_decoder.onnx", "nested"]
    run_main("optimize.py", "--model", "tiny-random", "--device", "cpu_fp32", "--output", out, "--overwrite",
             check=True)
    assert read_manifest(out).data["profile"] == "cpu_fp32"
    assert (out / "NOTES.txt").read_text() == "mine" and (out / "nested" / "keep.bin").read_bytes() == b"\x01"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left behind


def test_rebuilding_our_own_build_needs_no_overwrite(builds, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(builds.get("cpu_fp32"), out)
    (out / "NOTES.txt").write_text("mine")
    run_main("optimize.py", "--model", "tiny-random", "--device", "cpu", "--output", out, check=True)
    assert read_manifest(out).data["profile"] == "cpu"
    assert (out / "NOTES.txt").read_text() == "mine"
    assert set(read_manifest(out).data["files"]) == {p.name for p in out.iterdir()} - {MANIFEST_NAME, "NOTES.txt"}


def _copy_with_notes(builds, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(builds.get("cpu_fp32"), out)
    (out / "NOTES.txt").write_text("mine")
    return out, read_manifest(out).data["files"]


def test_interrupted_build_leaves_the_old_build_intact(builds, tiny_checkpoint, tmp_path, monkeypatch):
    from codes.export import build as build_module
    from codes.export.profiles import get_profile

    out, before = _copy_with_notes(builds, tmp_path)
    real_export = build_module.olive_export

    def export_then_die(spec, *args, **kwargs):
        if spec.key == "audio_heads_decoder":
            raise KeyboardInterrupt
        return real_export(spec, *args, **kwargs)

    monkeypatch.setattr(build_module, "olive_export", export_then_die)
    request = build_module.BuildRequest(tiny_checkpoint, get_profile("cpu"), out, overwrite=True)
    with pytest.raises(KeyboardInterrupt):
        build_module.build(request)
    assert read_manifest(out).data["files"] == before  # still the old, complete build
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_a_failure_while_moving_files_in_puts_the_old_build_back(builds, tiny_checkpoint, tmp_path, monkeypatch):
    from codes.export import build as build_module
    from codes.export.profiles import get_profile

    out, before = _copy_with_notes(builds, tmp_path)
    real_replace, moves = build_module.os.replace, []

    def replace_then_fail(source, target):
        if Path(target).parent == out and ".building-" in str(source):
            moves.append(target)
            if len(moves) == 4:  # midway through moving the new build's files in
                raise OSError("disk full")
        return real_replace(source, target)

    monkeypatch.setattr(build_module.os, "replace", replace_then_fail)
    with pytest.raises(OSError, match="disk full"):
        build_module.build(build_module.BuildRequest(tiny_checkpoint, get_profile("cpu"), out))
    monkeypatch.undo()
    assert read_manifest(out).data["files"] == before  # verifies every hash of the old build
    assert (out / "NOTES.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def _kill_build_once(out: Path, staged: str) -> list[Path]:
    """Start optimize.py into out, SIGKILL it once its staging folder holds `staged`; returns what it left."""
    import signal
    import subprocess
    import sys
    import time

    from helpers.scripts import ROOT

    process = subprocess.Popen([sys.executable, str(ROOT / "optimize.py"), "--model", "tiny-random", "--device", "cpu",
                                "--output", str(out)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pattern = f".{out.name}.building-*/{staged}"
    deadline = time.monotonic() + 300
    while not list(out.parent.glob(pattern)) and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait()
    return sorted({hit.parent for hit in out.parent.glob(pattern)})


def test_a_killed_rebuild_leaves_the_old_build_loadable(builds, tmp_path):
    out, before = _copy_with_notes(builds, tmp_path)
    assert _kill_build_once(out, "*.onnx")
    assert read_manifest(out).data["files"] == before
    assert (out / "NOTES.txt").read_text() == "mine"


def test_the_next_build_removes_a_killed_builds_staging_folder(tmp_path):
    (left,) = _kill_build_once(tmp_path / "killed", "*.onnx")  # mid-build: graphs already staged
    assert (left / ".builder").is_file()
    assert (left / ".work").is_dir()  # its scratch is in the staging folder, not left behind in the system's temp
    built = run_main("optimize.py", "--model", "tiny-random", "--device", "cpu_fp32", "--output", tmp_path / "next",
                     check=True)  # another output's build: any staging folder in the parent is checked
    assert not left.exists()
    assert [line for line in built.stdout.splitlines() if "staging folder" in line] == [
        f"removed {left}, the staging folder of a build that was killed"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["next"]


def _build_stopped_at_first_export(tiny_checkpoint, out: Path, monkeypatch) -> list[str]:
    """A build into out that cleans up and stages, then stops at its first export (fast); returns its log."""
    from codes.export import build as build_module
    from codes.export.profiles import get_profile

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(build_module, "olive_export", stop)
    lines = []
    with pytest.raises(KeyboardInterrupt):
        build_module.build(build_module.BuildRequest(tiny_checkpoint, get_profile("cpu"), out, log=lines.append))
    return lines


def test_a_staging_folder_whose_builder_is_alive_is_left_alone(tiny_checkpoint, tmp_path, monkeypatch):
    import subprocess
    import sys

    from helpers.scripts import ROOT

    holder = ("import sys, time; from pathlib import Path; from codes.export.staging import make_staging; "
              "staging, lock = make_staging(Path(sys.argv[1]), 'live'); print(staging, flush=True); time.sleep(600)")
    process = subprocess.Popen([sys.executable, "-c", holder, str(tmp_path)], cwd=ROOT, stdout=subprocess.PIPE,
                               text=True)
    try:
        live = Path(process.stdout.readline().strip())
        (live / "llm_decoder.onnx").write_bytes(b"staged")
        lines = _build_stopped_at_first_export(tiny_checkpoint, tmp_path / "out", monkeypatch)
        assert process.poll() is None  # still building
        assert (live / "llm_decoder.onnx").read_bytes() == b"staged" and lines == []
    finally:
        process.kill()
        process.wait()
    # Its builder gone, the very same folder is stale.
    assert _build_stopped_at_first_export(tiny_checkpoint, tmp_path / "out", monkeypatch) == [
        f"removed {live}, the staging folder of a build that was killed"]


def test_a_folder_named_like_staging_without_our_record_is_left_alone(tiny_checkpoint, tmp_path, monkeypatch):
    foreign = tmp_path / ".mine.building-notes"
    foreign.mkdir()
    (foreign / "keep.txt").write_text("mine")
    linked = tmp_path / ".linked.building-x"  # a link to a folder that does look like ours
    (tmp_path / "target").mkdir()
    (tmp_path / "target" / ".builder").write_text("pid 1")
    linked.symlink_to(tmp_path / "target")
    assert _build_stopped_at_first_export(tiny_checkpoint, tmp_path / "out", monkeypatch) == []
    assert (foreign / "keep.txt").read_text() == "mine"
    assert linked.is_symlink() and (tmp_path / "target" / ".builder").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".linked.building-x", ".mine.building-notes", "target"]


def test_a_staging_folder_holding_the_previous_build_is_kept(tiny_checkpoint, tmp_path, monkeypatch):
    """A build killed while moving files in left the old build's files in .previous/: their only copy."""
    from codes.export.staging import make_staging

    staging, lock = make_staging(tmp_path, "out")
    (staging / ".previous").mkdir()
    (staging / ".previous" / "llm_decoder.onnx").write_bytes(b"old")
    lock.close()  # its builder is gone
    lines = _build_stopped_at_first_export(tiny_checkpoint, tmp_path / "out", monkeypatch)
    assert (staging / ".previous" / "llm_decoder.onnx").read_bytes() == b"old"
    assert lines == [f"kept {staging}: a build killed while installing moved the previous build's files into "
                     ".previous/"]


def test_head_dim_genai_cannot_run_falls_back_to_torch_and_synthesizes(tiny_checkpoint, tmp_path):
    """ORT's CPU GroupQueryAttention runs only head sizes that are multiples of 16."""
    ckpt = upstream_checkpoint(tmp_path / "head24", tiny_checkpoint, seed=2, hidden_size=96,
                               num_attention_heads=4, num_key_value_heads=2, head_dim=24)

    refused = run_script("optimize.py", "--model", ckpt, "--llm-export", "genai", "--output", tmp_path / "genai")
    assert refused.returncode == 2 and "--llm-export torch" in last_error_line(refused)
    assert len(refused.stderr.strip().splitlines()) == 1 and not (tmp_path / "genai").exists()

    out = tmp_path / "build"
    built = run_main("optimize.py", "--model", ckpt, "--include-higgs", "--output", out, check=True)
    assert "head_dim 24" in built.stdout and "torch" in built.stdout
    data = read_manifest(out).data
    assert data["llm_build"] == "torch" and "head_dim 24" in data["backbone"]["llm_decoder"]["build_reason"]
    spoken = run_script("inference.py", "--model_dir", out, "--text", "Hello.", "--num_steps", "4", "--quiet",
                        "--output", tmp_path / "out.wav")
    assert spoken.returncode == 0, spoken.stderr
    assert (tmp_path / "out.wav").stat().st_size > 1000


def test_an_onnx_runtime_failure_is_one_error_line(builds, tmp_path):
    """A graph that loads but fails when it runs: the user sees one line, not a traceback."""
    from onnx import TensorProto, helper

    from codes.common.fileio import sha256_file

    out = tmp_path / "out"
    shutil.copytree(builds.get("cpu_fp32", "--include-higgs", "--higgs-precision", "fp32"), out)
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["inputs_embeds", "bad_shape"], ["hidden_states"])], "fails",
        [helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["batch", "sequence", 64]),
         helper.make_tensor_value_info("attention_mask", TensorProto.BOOL, ["batch", 1, "sequence", "sequence"])],
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, None)],
        [helper.make_tensor("bad_shape", TensorProto.INT64, [1], [7])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    onnx.save(model, str(out / "llm_decoder.onnx"))
    manifest = json.loads((out / MANIFEST_NAME).read_text())
    manifest["files"]["llm_decoder.onnx"] = sha256_file(out / "llm_decoder.onnx")
    (out / MANIFEST_NAME).write_text(json.dumps(manifest))
    result = run_script("inference.py", "--model_dir", out, "--text", "Hello.", "--quiet",
                        "--output", tmp_path / "out.wav")
    assert result.returncode == 1
    assert result.stderr.strip().splitlines() == [last_error_line(result)]
    assert last_error_line(result).startswith("error: ONNX Runtime failed:")
    assert not (tmp_path / "out.wav").exists()


def test_generated_checkpoint_is_input_dependent(tiny_checkpoint):
    """docs/DESIGN.md §test-weights: codes from a test model must depend on the text, vary, and not sit on a knife edge."""
    import torch
    from omnivoice.models.omnivoice import OmniVoice, OmniVoiceGenerationConfig

    model = OmniVoice.from_pretrained(str(tiny_checkpoint.path), attn_implementation="sdpa").eval()
    config = OmniVoiceGenerationConfig(position_temperature=0.0, class_temperature=0.0)
    task = model._preprocess_all(text=["The weather is lovely today.", "Quantum chromodynamics!"],
                                 language="en", duration=1.6)
    with torch.no_grad():
        first, second = model._generate_iterative(task, config)
    assert (first != second).float().mean() > 0.3  # the text matters
    # Codes vary along time (the first codebooks, revealed while all else is MASK, vary least).
    assert sum(len(torch.unique(codebook)) >= 3 for codebook in first) >= 6

    generator = torch.Generator().manual_seed(0)

    def jitter(module, inputs):  # ~1e-5 relative noise on the heads' input
        (hidden,) = inputs
        return (hidden * (1 + 1e-5 * torch.randn(hidden.shape, generator=generator)),)

    handle = model.audio_heads.register_forward_pre_hook(jitter)
    try:
        with torch.no_grad():
            jittered = model._generate_iterative(task, config)
    finally:
        handle.remove()
    assert torch.equal(jittered[0], first) and torch.equal(jittered[1], second)  # no near-ties decide codes


# --- the recogniser (--include-asr, --asr-only) --------------------------------------------------


def test_the_recogniser_is_recorded_in_the_manifest_and_its_hashes_checked(builds, tmp_path):
    from codes.common.fileio import sha256_file
    from codes.export.asr_build import written_files
    from codes.runtime.synthesis import OmniVoiceOnnx
    from helpers.synthesis_inputs import ASR_BUILD

    folder = shutil.copytree(builds.get(*ASR_BUILD), tmp_path / "copy")
    manifest = read_manifest(folder)
    section = manifest.asr
    assert section["models_dir"] == "asr" and section["precision"] == "fp32"  # cpu_fp32's
    assert section["source"]["asr_model"] == "tiny-whisper"
    assert section["manifest_sha256"] == sha256_file(folder / "asr" / "asr_manifest.json")
    on_disk = sorted(p.relative_to(folder).as_posix() for p in (folder / "asr").rglob("*") if p.is_file())
    assert on_disk == sorted(written_files(folder / "asr"))
    assert not any(name.startswith("asr/") for name in manifest.data["files"])  # its own manifest hashes them
    assert OmniVoiceOnnx(folder, threads=1).load_recogniser().transcribe(np.zeros(24000, np.float32), 24000) is not None

    with open(folder / "asr" / "decoder.onnx.data", "r+b") as f:
        f.seek(-8, 2)
        f.write(b"\x00" * 8)
    with pytest.raises(UserError, match="decoder.onnx.data does not match its sha256"):
        OmniVoiceOnnx(folder, threads=1).load_recogniser()
    with open(folder / "asr" / "asr_manifest.json", "a") as f:
        f.write(" ")
    with pytest.raises(UserError, match="asr_manifest.json does not match its sha256 in omnivoice_manifest.json"):
        OmniVoiceOnnx(folder, threads=1).load_recogniser()


def test_asr_only_builds_the_recogniser_alone_or_beside_a_build_it_leaves_untouched(builds, tmp_path):
    # Alone: no OmniVoice checkpoint is read, so --model may name nothing at all.
    alone = tmp_path / "alone"
    built = run_main("optimize.py", "--asr-only", "--asr-model", "tiny-whisper", "--device", "cpu_int8",
                     "--model", tmp_path / "nowhere", "--output", alone, check=True)
    assert "(recogniser int8 only)" in built.stdout
    assert sorted(p.name for p in alone.iterdir()) == ["asr", MANIFEST_NAME]
    assert read_manifest(alone).asr["precision"] == "int8"
    decoder = onnx.load(str(alone / "asr" / "decoder.onnx"), load_external_data=False)
    assert "MatMulIntegerToFloat" in {node.op_type for node in decoder.graph.node}
    result = run_main("eval.py", "--mode", "equiv", "--model_dir", alone, "--asr_dir", alone / "asr")
    assert result.returncode == 0 and result.stdout.count("recogniser text") >= 3, result.stdout + result.stderr

    # Beside a backbone build: its files and manifest entries stay as they were, and a backbone rebuild keeps it.
    out = shutil.copytree(builds.get("cpu_fp32"), tmp_path / "out")
    (out / "NOTES.txt").write_text("mine")
    before = read_manifest(out).data
    run_main("optimize.py", "--asr-only", "--asr-model", "tiny-whisper", "--device", "gpu", "--output", out, check=True)
    after = read_manifest(out).data
    assert after["files"] == before["files"] and after["backbone"] == before["backbone"]
    assert after["profile"] == "cpu_fp32" and after["asr"]["precision"] == "fp16"  # gpu's recogniser
    assert json.loads((out / "asr" / "asr_manifest.json").read_text())["io_dtype"] == "float16"
    run_main("optimize.py", "--model", "tiny-random", "--device", "cpu_fp32", "--output", out, check=True)
    assert read_manifest(out).data["asr"] == after["asr"]
    run_main("optimize.py", "--asr-only", "--asr-model", "tiny-whisper", "--device", "cpu_fp32", "--output", out,
             check=True)  # a rebuild of the recogniser replaces its own files only
    assert read_manifest(out).data["asr"]["precision"] == "fp32"
    assert (out / "NOTES.txt").read_text() == "mine"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder left


def test_the_recogniser_precision_follows_the_profile():
    from codes.export.asr_build import profile_precision
    from codes.export.profiles import PROFILES

    assert {name: profile_precision(name) for name in PROFILES} == {
        "cpu": "int8", "cpu_fp16": "int8", "gpu": "fp16", "cpu_fp32": "fp32", "cpu_int8": "int8", "web": "int8"}
    assert profile_precision("cpu", "fp32") == "fp32"


@pytest.mark.parametrize("model, message", [
    ("{tmp}/nowhere", "no such folder"),
    ("{ckpt}", "has model_type 'omnivoice', not 'whisper'"),
    ("openai/whisper-large-v3-turbo", "nor in the local Hugging Face cache (this toolkit never downloads); pass a "
                                      "local checkpoint directory with --asr-model DIR"),
])
def test_a_bad_asr_model_is_one_line_before_anything_is_built(tiny_checkpoint, tmp_path, model, message):
    model = model.replace("{tmp}", str(tmp_path)).replace("{ckpt}", str(tiny_checkpoint.path))
    result = run_script("optimize.py", "--model", "tiny-random", "--include-asr", "--asr-model", model,
                        "--output", tmp_path / "out", env={"HF_HUB_CACHE": str(tmp_path / "empty-cache")})
    assert result.returncode == 2 and message in last_error_line(result), result.stderr
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".out.building-*"))


def test_a_recogniser_that_crashes_on_its_first_window_is_one_line_and_never_installed(tmp_path, monkeypatch):
    """The build probes the recogniser in a child process: genai's graph for a zero-q/v-bias Whisper (its
    encoder's Attention without a bias, as genai 0.18 writes it) segfaults ONNX Runtime, and that becomes
    one line, with nothing written."""
    from codes.export import asr_build
    from codes.export.whisper_checkpoint import generated_whisper

    zero_bias = generated_whisper("tiny-whisper", zero_qv_biases=True)
    monkeypatch.setattr(asr_build, "restore_attention_bias", lambda graph: graph)  # genai's graph as it comes
    result = run_main("optimize.py", "--asr-only", "--asr-model", zero_bias, "--device", "cpu_fp32",
                      "--output", tmp_path / "out")
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    line = last_error_line(result)
    assert line.startswith("error: ") and "crashed ONNX Runtime (SIGSEGV)" in line and "nothing was installed" in line
    assert list(tmp_path.iterdir()) == []  # no output folder, no staging left beside it
