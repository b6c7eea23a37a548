"""optimize.py --device web (issue 60, item 1): graphs every onnxruntime-web backend runs, the backbone's attention in
standard ops equal to GroupQueryAttention's, a build that is also a static site checked by its manifest's hashes,
probed on onnxruntime-web's WASM backend in Node with the Python runtime's numbers, and spoken by the Python runtime.
A machine that cannot assemble or probe the site is refused in one line before anything is written."""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from codes.export import web_site
from codes.export.web_attention import standard_attention
from codes.runtime.contract.manifest import MANIFEST_NAME, read_manifest
from codes.runtime.voices.prompt import build_cfg_batch
from helpers.scripts import ROOT, last_error_line, run_main
from helpers.synthesis_inputs import FP32_BUILD

WEB_BUILD = ("web", "--include-higgs")  # the same build the page's tests load
CPU = ["CPUExecutionProvider"]


@pytest.fixture(scope="module")
def web_build(builds):
    return builds.get(*WEB_BUILD)


def _session(model: onnx.ModelProto | str) -> ort.InferenceSession:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    return ort.InferenceSession(source, providers=CPU)


def _read_rows(mask: np.ndarray) -> np.ndarray:
    """[B,S]: the positions whose mask row sees some key; a conditional row's padding (all False) is never read."""
    return mask[:, 0].any(-1)


def test_standard_attention_gives_the_gqa_backbones_hidden_states(builds):
    """The rewrite on the tiny fp32 backbone, through ONNX Runtime, over a padded CFG batch of two items."""
    folder = builds.get(*FP32_BUILD)
    manifest = read_manifest(folder)
    path = manifest.path_of("llm_decoder")
    rewritten = standard_attention(onnx.load(str(path)), manifest.data["model"]["head_dim"])
    assert not [n for n in rewritten.graph.node if n.op_type == "GroupQueryAttention"]
    # what is left of the mask plumbing is the bias alone: no key lengths for a kernel that no longer exists
    assert not [n for n in rewritten.graph.node if n.op_type in ("ReduceMax", "ReduceSum")]
    items = [(np.zeros((8, n), np.int64), np.zeros(n, bool)) for n in (13, 8)]
    mask = build_cfg_batch(items, [6, 4]).attention_mask  # rows of 13, 8 and their targets, padded to 13
    embeds = np.random.default_rng(0).standard_normal((*mask.shape[:1], mask.shape[2], 64)).astype(np.float32)
    feeds = {"inputs_embeds": embeds, "attention_mask": mask}
    gqa = _session(str(path)).run(None, feeds)[0]
    ours = _session(rewritten).run(None, feeds)[0]
    read = _read_rows(mask)
    assert not read.all()  # the batch has padding
    assert np.abs(gqa - ours)[read].max() <= 1e-5, "the rewritten attention moved the hidden states"
    assert np.abs(gqa).max() > 1.0  # hidden states of real size: the bound above means something


def _single_gqa(interleaved: bool, head_dim: int, rotary_dim: int, scale: float) -> onnx.ModelProto:
    """One bidirectional GQA node fed as make_bidirectional feeds it, with its own rotary caches."""
    heads, kv_heads, width = 4, 2, 4 * head_dim + 2 * 2 * head_dim
    rng = np.random.default_rng(1)
    angles = rng.uniform(0, 3, (64, rotary_dim // 2)).astype(np.float32)
    constants = [numpy_helper.from_array(np.cos(angles), "cos_cache"), numpy_helper.from_array(np.sin(angles), "sin_cache"),
                 numpy_helper.from_array(np.array([heads * head_dim, kv_heads * head_dim, kv_heads * head_dim]), "sizes"),
                 numpy_helper.from_array(np.array([1, 2]), "query_axes"), numpy_helper.from_array(np.array([1]), "one"),
                 helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]),
                 helper.make_tensor("blocked", TensorProto.FLOAT, [], [float(np.finfo(np.float32).min)])]
    nodes = [
        helper.make_node("Split", ["inputs_embeds", "sizes"], ["q", "k", "v"], axis=-1),
        helper.make_node("Where", ["attention_mask", "zero", "blocked"], ["bias"]),
        helper.make_node("Cast", ["attention_mask"], ["mask64"], to=TensorProto.INT64),
        helper.make_node("ReduceMax", ["mask64", "query_axes"], ["keys"], keepdims=0),
        helper.make_node("ReduceSum", ["keys", "one"], ["key_count"], keepdims=0),
        helper.make_node("Sub", ["key_count", "one"], ["last_key"]),
        helper.make_node("Cast", ["last_key"], ["seqlens_k"], to=TensorProto.INT32),
        helper.make_node("Shape", ["inputs_embeds"], ["length"], start=1, end=2),
        helper.make_node("Squeeze", ["length"], ["length_scalar"]),
        helper.make_node("Cast", ["length_scalar"], ["total"], to=TensorProto.INT32),
        helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "seqlens_k", "total", "cos_cache", "sin_cache",
                                                "", "bias"], ["hidden_states", "present_key", "present_value"],
                         domain="com.microsoft", num_heads=heads, kv_num_heads=kv_heads, scale=scale, do_rotary=1,
                         rotary_interleaved=int(interleaved), causal=0),
    ]
    graph = helper.make_graph(nodes, "gqa", [
        helper.make_tensor_value_info("attention_mask", TensorProto.BOOL, ["B", 1, "S", "S"]),
        helper.make_tensor_value_info("inputs_embeds", TensorProto.FLOAT, ["B", "S", width])],
        [helper.make_tensor_value_info("hidden_states", TensorProto.FLOAT, ["B", "S", heads * head_dim])], constants)
    return helper.make_model(graph, ir_version=10, opset_imports=[helper.make_opsetid("", 22),
                                                                   helper.make_opsetid("com.microsoft", 1)])


@pytest.mark.parametrize("interleaved, head_dim, rotary_dim, scale", [
    (False, 16, 16, 0.25), (True, 16, 16, 0.0), (False, 32, 16, 0.0), (True, 32, 16, 0.3)])
def test_every_rotary_form_and_scale_matches_gqa(interleaved, head_dim, rotary_dim, scale):
    """Halves and interleaved pairs, a rotary over part of the head, and the default scale 1/sqrt(head_dim)."""
    rewritten = standard_attention(_single_gqa(interleaved, head_dim, rotary_dim, scale), head_dim)
    embeds = np.random.default_rng(2).standard_normal((2, 9, 8 * head_dim)).astype(np.float32)
    mask = np.ones((2, 1, 9, 9), bool)
    mask[1, 0, :, 6:] = False  # the second row's last keys are padding
    feeds = {"inputs_embeds": embeds, "attention_mask": mask}
    gqa = _session(_single_gqa(interleaved, head_dim, rotary_dim, scale)).run(None, feeds)[0]
    ours = _session(rewritten).run(None, feeds)[0]
    assert np.abs(gqa - ours).max() <= 1e-5


def test_the_web_build_is_a_site_its_manifest_checks(web_build):
    manifest = read_manifest(web_build)  # verifies every sha256, the site's files' too
    data = manifest.data
    assert data["profile"] == "web" and data["attention"] == "bidirectional"
    files = data["files"]
    site = {web_site.ENTRY, *(f"{web_site.ORT_DIR}/{name}" for name in web_site.ORT_FILES),
            *(f"{web_site.VENDOR_DIR}/{name}" for _, name in web_site.VENDOR.values()),
            *(f"{web_site.RUNTIME_DIR}/data/{p.name}" for p in (ROOT / "codes/runtime/data").glob("*.json"))}
    site |= {f"{web_site.RUNTIME_DIR}/{p.relative_to(ROOT / 'web/src').as_posix()}"
             for p in (ROOT / "web/src").rglob("*.mjs")}
    site |= {p.relative_to(ROOT / "web/site").as_posix() for p in (ROOT / "web/site").rglob("*") if p.is_file()}
    assert site <= set(files), f"the site lacks {sorted(site - set(files))}"
    assert not [p for p in web_build.rglob("*") if p.is_symlink()]  # a static site: real files only
    for name in (ROOT / "codes/runtime/data").glob("*.json"):
        assert (web_build / web_site.RUNTIME_DIR / "data" / name.name).read_bytes() == name.read_bytes()
    for name in web_site.ORT_FILES:
        assert ((web_build / web_site.ORT_DIR / name).read_bytes()
                == (ROOT / "web" / web_site.ORT_DIST / name).read_bytes())
    entry = (web_build / web_site.ENTRY).read_text()
    assert f'import * as ort from "./ort/{web_site.ORT_BUNDLE}";' in entry
    assert 'useOnnxRuntime(ort, { wasmPaths: new URL("./ort/", import.meta.url).href });' in entry
    assert 'export * from "./omnivoice/index.mjs";' in entry
    # a page has no node_modules: the runtime's copies import the packages it uses from the site's vendor/
    for module in (web_build / web_site.RUNTIME_DIR).rglob("*.mjs"):
        text = module.read_text()
        for package in web_site.VENDOR:
            assert f'from "{package}"' not in text and f"from '{package}'" not in text, f"{module} imports {package}"
    # the manifest's web facts: every weight within WebGPU's default device, the download sizes
    web = data["web"]
    assert web["webgpu"]["required_limits"] == {}
    assert 0 < web["webgpu"]["largest_weight"]["bytes"] <= web_site.WEBGPU_DEFAULT_LIMITS["maxStorageBufferBindingSize"]
    everything = sum(p.stat().st_size for p in web_build.rglob("*") if p.is_file() and p.name != MANIFEST_NAME)
    codec_manifest = (web_build / "audio_tokenizer" / MANIFEST_NAME).stat().st_size
    assert web["download_bytes"]["all"] == everything + codec_manifest  # the codec's manifest is fetched too
    assert 0 < web["download_bytes"]["speech"] < web["download_bytes"]["all"]  # speaking needs no encoder


def test_the_web_graphs_take_forms_every_backend_runs(web_build):
    manifest = read_manifest(web_build, verify=False)

    def graph(key):
        return onnx.load(str(manifest.path_of(key)), load_external_data=False)

    backbone = graph("llm_decoder")
    ops = {n.op_type for n in backbone.graph.node}
    assert "GroupQueryAttention" not in ops and {"Softmax", "MatMul", "MatMulNBits"} <= ops
    lookups = [n for n in graph("audio_embeddings_encoder").graph.node if n.op_type == "GatherBlockQuantized"]
    assert len(lookups) == 2  # the text and audio tables, 8-bit
    assert all(helper.get_attribute_value(a) == 8 for n in lookups for a in n.attribute if a.name == "bits")
    levels = {helper.get_attribute_value(a) for n in backbone.graph.node if n.op_type == "MatMulNBits"
              for a in n.attribute if a.name == "accuracy_level"}
    assert levels == {1}  # int4 computed in fp32, as WASM and WebGPU compute it
    codec_dir, codec = manifest.codec()
    stored = {"audio_heads_decoder": manifest.path_of("audio_heads_decoder"),
              **{key: codec_dir / entry["filename"] for key, entry in codec["sub_models"].items()}}
    for key, path in stored.items():  # fp16 at most as storage: every fp16 weight is cast to fp32 as it is read
        model = onnx.load(str(path), load_external_data=False)
        halves = {t.name for t in model.graph.initializer if t.data_type == TensorProto.FLOAT16}
        readers = [n for n in model.graph.node if set(n.input) & halves]
        assert all(n.op_type == "Cast" and n.attribute[0].i == TensorProto.FLOAT for n in readers), key
        assert halves or key == "quantizer_encoder", key  # the quantizer stays fp32 (profiles.codec_graph_recipe)
        computed = {v.type.tensor_type.elem_type for v in (*model.graph.input, *model.graph.output, *model.graph.value_info)}
        assert TensorProto.FLOAT16 not in computed, key


def _probe_inputs(inputs: list[dict], index: int, dims: dict) -> dict:
    """The inputs web/tools/probe_wasm.mjs gives the graph at `index`: its generator's floats, zeros, all True."""
    state = index + 1

    def floats(count):
        nonlocal state
        out = np.empty(count, np.float64)
        for i in range(count):
            state = (state * 1664525 + 1013904223) & 0xFFFFFFFF
            out[i] = 0.25 + 0.5 * (state / 2 ** 32)
        return out.astype(np.float32)

    feeds = {}
    for entry in inputs:
        shape = [d if isinstance(d, int) and d > 0 else dims[d] for d in entry["shape"]]
        size = math.prod(shape)
        if entry["dtype"] == "float32":
            feeds[entry["name"]] = floats(size).reshape(shape)
        elif entry["dtype"] == "bool":
            feeds[entry["name"]] = np.ones(shape, bool)
        else:
            feeds[entry["name"]] = np.zeros(shape, np.dtype(entry["dtype"]))
    return feeds


def test_the_wasm_probe_ran_every_graph_with_the_python_runtimes_numbers(web_build):
    manifest = read_manifest(web_build, verify=False)
    codec_dir, codec = manifest.codec()
    graphs = [*manifest.sub_models, *manifest.data["scoring"], *manifest.data["glue"], *codec["sub_models"]]
    probe = manifest.data["web"]["probe"]
    assert probe["backend"] == "wasm" and probe["host"] == "node" and probe["graphs"] == graphs
    result = subprocess.run(["node", str(ROOT / "web" / web_site.PROBE), str(web_build)], capture_output=True,
                            text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout.splitlines()[-1])
    assert report["ok"] and report["guessed_dims"] == []
    dims = report["dims"]
    entries = [*manifest.sub_models.values(), *manifest.data["scoring"].values(), *manifest.data["glue"].values()]
    files = [web_build / e["filename"] for e in entries] + [codec_dir / e["filename"] for e in codec["sub_models"].values()]
    inputs = [e["inputs"] for e in (*entries, *codec["sub_models"].values())]
    for index, (ran, path, graph_inputs) in enumerate(zip(report["graphs"], files, inputs)):
        session = _session(str(path))
        outputs = session.run(None, _probe_inputs(graph_inputs, index, dims))
        for output, value in zip(session.get_outputs(), outputs):
            assert list(value.shape) == ran["outputs"][output.name], (ran["graph"], output.name)
            if output.name in ran["abs_sums"]:
                ours = float(np.abs(value.astype(np.float64)).sum())
                assert ours == pytest.approx(ran["abs_sums"][output.name], rel=1e-4), (ran["graph"], output.name)


def test_the_python_runtime_speaks_the_web_build(web_build):
    from codes.runtime.synthesis import OmniVoiceOnnx

    tts = OmniVoiceOnnx(web_build, threads=1)
    audio, codes = tts.generate("The web build speaks in Python too.", language="en", num_frames=30, num_steps=4,
                                seed=0, return_codes=True)
    assert codes.shape == (8, 30) and codes.dtype == np.int64
    assert 0 <= codes.min() and codes.max() < 1024
    assert audio.dtype == np.float32 and audio.size > 0 and np.isfinite(audio).all()


@pytest.mark.parametrize("what", ["node_modules", "node"])
def test_a_machine_that_cannot_make_the_site_is_refused_in_one_line(what, tiny_checkpoint, tmp_path, monkeypatch):
    if what == "node_modules":  # a checkout whose web/ never had `make setup`
        bare = tmp_path / "web"
        (bare / "src").mkdir(parents=True)
        monkeypatch.setattr(web_site, "WEB", bare)
    else:
        monkeypatch.setattr(web_site.shutil, "which", lambda name: None)
    out = tmp_path / "site"
    result = run_main("optimize.py", "--model", "tiny-random", "--device", "web", "--output", out)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1
    line = last_error_line(result)
    assert ("make setup" in line and "node_modules" in line) if what == "node_modules" else "`node`" in line
    assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == (["web"] if what == "node_modules" else [])


def test_a_page_file_named_like_a_build_file_is_refused_before_anything_is_written(tiny_checkpoint, tmp_path,
                                                                                  monkeypatch):
    web = tmp_path / "web"
    (web / "site").mkdir(parents=True)
    for name in ("src", "node_modules", "tools"):
        (web / name).symlink_to(ROOT / "web" / name, target_is_directory=True)
    (web / "site" / "tokenizer.json").write_text("{}")  # would replace the build's tokenizer
    monkeypatch.setattr(web_site, "WEB", web)
    out = tmp_path / "site"
    result = run_main("optimize.py", "--model", "tiny-random", "--device", "web", "--output", out)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "web/site/tokenizer.json" in last_error_line(result)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["web"]
