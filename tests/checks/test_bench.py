"""eval.py --mode rtf on the tiny model: a smoke test of the benchmark (no timing assertions)."""

from __future__ import annotations

import json

from codes.common.isa import native_kernel_lanes
from helpers.scripts import run_main
from helpers.synthesis_inputs import FP32_BUILD


def test_rtf_benchmark_writes_side_by_side_results(builds, tmp_path):
    fp32 = builds.get(*FP32_BUILD)  # the codec's precision does not matter here: the shared fp32 build
    int4 = builds.get("cpu", "--include-higgs")
    out = tmp_path / "bench" / "results"
    result = run_main("eval.py", "--mode", "rtf", "--model_dir", int4, "--compare", fp32,
                      "--torch", "tiny-random", "--torch-dtype", "fp32", "--workload", "smoke",
                      "--repeats", "1", "--warmup", "0", "--threads", "2", "--step-batches", "1", "2", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["command"].startswith(f"python eval.py --mode rtf --model_dir {int4} --compare {fp32} ")
    engines = set(report["results"])
    assert engines == {f"ours cpu ({int4.name})", f"ours cpu_fp32 ({fp32.name})", "upstream torch fp32"}
    for cases in report["results"].values():
        assert set(cases) == {"1 s utterance", "batch of 2 x 1 s"}
        for entry in cases.values():
            assert entry["total_s"]["median"] > 0 and entry["rtf"] > 0
    ours = report["results"][f"ours cpu ({int4.name})"]["1 s utterance"]
    assert {"prompt", "embeddings", "backbone", "heads", "codec"} <= set(ours["stages_s"])
    # Token agreement of the int4 build with the fp32 reference, and each build's peak memory.
    agreement = report["agreement"][f"ours cpu ({int4.name})"]
    assert all(0.0 <= share <= 1.0 for share in agreement.values())
    assert set(report["memory_mb"]) == {f"ours cpu ({int4.name})", f"ours cpu_fp32 ({fp32.name})"}
    # Where the first build's step goes, from ONNX Runtime's profiler: all three graphs, attention included.
    profile = report["step_profile"]
    assert profile["model"] == f"ours cpu ({int4.name})"
    ops = {(row["graph"], row["op"]) for row in profile["ops"] if row["s_per_step"] > 0}
    attention = "BidirectionalAttention" if native_kernel_lanes() == 16 else "GroupQueryAttention"  # int4: a quantized one
    assert {("llm_decoder", attention), ("llm_decoder", "MatMulNBits"),
            ("audio_heads_decoder", "MatMulNBits"), ("audio_embeddings_encoder", "GatherBlockQuantized")} <= ops
    markdown = out.with_suffix(".md").read_text()
    assert "Where a decoding step goes" in markdown
    assert "step × vs torch fp32" in markdown and "Token agreement" in markdown and report["machine"]["cpu"] in markdown
    # One step at each batch size, run each way, with the host's share.
    split = report["step_split"]["rows"]
    assert [(row["batch"], row["step"]) for row in split] == [
        (batch, step) for batch in (1, 2) for step in ("device", "graph", "numpy")]
    assert all(row["step_s"] > 0 and 0 <= row["host_share"] <= 1 for row in split)
    assert all(row["graphs_s"]["scoring"] > 0 for row in split if row["step"] != "numpy")
    assert all(row["graphs_s"]["glue"] > 0 for row in split if row["step"] == "device")
    assert "One decoding step by batch size" in markdown
