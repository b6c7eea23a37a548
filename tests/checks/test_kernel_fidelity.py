"""bench/kernel_fidelity.py on the tiny cpu_int8 build: its fidelity on our kernels and on ONNX Runtime's own ops,
really measured against upstream, on one page."""

from __future__ import annotations

import json

from codes.common.isa import native_kernel_lanes
from helpers.scripts import run_script


def test_each_build_is_measured_on_both_kernels(builds, tmp_path):
    folder = builds.get("cpu_int8")
    out = tmp_path / "fidelity.md"
    result = run_script("bench/kernel_fidelity.py", "--builds", folder, "--steps", "1", "--out", out)
    lanes = native_kernel_lanes()
    if lanes == 0:  # a CPU without AVX2 and FMA: one line, no page
        assert result.returncode == 2 and not out.exists()
        assert result.stderr.strip().splitlines() == [
            f"error: {folder}: our kernels do not run here (this CPU lacks AVX2 and FMA)"]
        return
    assert result.returncode == 0, result.stdout + result.stderr
    rows = json.loads(out.with_suffix(".json").read_text())["rows"]
    kernels = ["ours"] * (lanes == 16) + ["ours-avx2", "ONNX Runtime's"]  # each width this CPU runs, then ORT's
    assert [(row["build"], row["kernels"]) for row in rows] == [(str(folder), kernel) for kernel in kernels]
    assert all(0 < row["first_step_agreement"] <= 1 and row["num_steps"] == 1 for row in rows)
    page = out.read_text()
    assert all(f"| `{folder.name}` | {kernel} | " in page for kernel in kernels)


def test_a_folder_that_is_not_a_build_is_one_line(tmp_path):
    result = run_script("bench/kernel_fidelity.py", "--builds", tmp_path, "--out", tmp_path / "page.md")
    assert result.returncode == 2 and not (tmp_path / "page.md").exists()
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path} has no omnivoice_manifest.json; pass a folder optimize.py built"]
