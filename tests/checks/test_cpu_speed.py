"""bench/cpu_speed.py on the tiny fp32 build: our whole process and upstream's generate, really run and
interleaved, on a page that names the CPU. (No timing assertion: speeds are what this machine gives.)"""

from __future__ import annotations

import json
from pathlib import Path

from codes.checks.cpu_speed import checkout_commit, round_ratio, upstream_dtypes
from helpers.scripts import run_script
from helpers.synthesis_inputs import FP32_BUILD

ROOT = Path(__file__).resolve().parents[2]


def test_upstream_runs_in_bf16_only_where_the_cpu_multiplies_bf16():
    assert upstream_dtypes(frozenset({"avx2", "avx512f"})) == ["fp32"]
    assert upstream_dtypes(frozenset({"avx512_bf16"})) == ["fp32", "bf16"]
    assert upstream_dtypes(frozenset({"amx_bf16", "amx_int8"})) == ["fp32", "bf16"]


def test_the_rounds_ratio_pairs_each_round_s_two_runs():
    """A slow spell in one round slows both of its runs: their ratio, not each side's fastest, is what it keeps."""
    base, other = [40.0, 36.0, 46.0], [30.0, 33.0, 35.0]
    assert round_ratio(base, other) == 46.0 / 35.0  # the median of 1.333, 1.091 and 1.314
    assert round_ratio(other, other) == 1.0


def test_the_page_times_our_process_and_upstream_side_by_side(builds, tmp_path):
    folder = builds.get(*FP32_BUILD)
    out = tmp_path / "speed.md"
    result = run_script("bench/cpu_speed.py", "--builds", folder, "--checkpoint", "tiny-random", "--seconds", "2",
                        "--num_steps", "2", "--rounds", "1", "--work", tmp_path / "work", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    data = json.loads(out.with_suffix(".json").read_text())
    assert set(data["runs"]) == {f"ours:{folder}"} | {f"upstream:{dtype}" for dtype in upstream_dtypes()}
    assert all(len(times) == 1 and times[0] > 0 for times in data["runs"].values())
    page = out.read_text()
    assert data["machine"]["cpu"] in page and "upstream fp32, generate alone" in page
    assert f"`{folder.name}`, whole process" in page and "the same, median of the rounds" in page
    assert (tmp_path / "work" / "ours0.wav").stat().st_size > 44


def test_a_folder_that_is_not_a_build_is_one_line(tmp_path):
    result = run_script("bench/cpu_speed.py", "--builds", tmp_path, "--out", tmp_path / "page.md")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path} has no omnivoice_manifest.json; pass a folder optimize.py built"]
    assert not (tmp_path / "page.md").exists()


def test_the_first_build_runs_with_the_checkout_it_is_compared_as(builds, tmp_path):
    """An older commit's build is timed as that commit ran it: its own checkout's inference.py."""
    folder = builds.get(*FP32_BUILD)
    old = tmp_path / "old"
    old.symlink_to(ROOT)  # a second checkout: any path with an inference.py
    out = tmp_path / "speed.md"
    result = run_script("bench/cpu_speed.py", "--builds", folder, folder, "--first_checkout", old, "--seconds", "2",
                        "--num_steps", "2", "--rounds", "1", "--work", tmp_path / "work", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert set(json.loads(out.with_suffix(".json").read_text())["runs"]) == {f"ours:{folder}@{old}", f"ours:{folder}"}
    assert f"`{folder.name}`, whole process, run by {checkout_commit(ROOT)}'s checkout" in out.read_text()

    result = run_script("bench/cpu_speed.py", "--builds", folder, "--first_checkout", tmp_path / "work",
                        "--out", tmp_path / "other.md")
    assert result.returncode == 2 and not (tmp_path / "other.md").exists()
    assert result.stderr.strip().splitlines() == [
        f"error: {tmp_path / 'work'} has no inference.py; pass a checkout (git worktree add DIR COMMIT)"]


def test_each_build_can_also_run_on_other_kernels(builds, tmp_path):
    """--kernels avx2 and --onnx_kernels: a row per build this checkout runs and switch value, our kernels at 8
    lanes or switched off for it alone."""
    folder = builds.get(*FP32_BUILD)
    out = tmp_path / "speed.md"
    result = run_script("bench/cpu_speed.py", "--builds", folder, "--kernels", "avx2", "--onnx_kernels", "--seconds",
                        "2", "--num_steps", "2", "--rounds", "1", "--work", tmp_path / "work", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    assert list(json.loads(out.with_suffix(".json").read_text())["runs"]) == [
        f"ours:{folder}", f"ours:{folder}#kernels=avx2", f"ours:{folder}#kernels=onnx"]
    page = out.read_text()
    assert f"`{folder.name}`, whole process | " in page
    assert f"`{folder.name}`, whole process, ONNX Runtime's own ops (`OMNIVOICE_ONNX_KERNELS=onnx`) | " in page
    assert (f"`{folder.name}`, whole process, our kernels' AVX2 loops, ONNX Runtime's attention "
            "(`OMNIVOICE_ONNX_KERNELS=avx2`) | ") in page
    # each row against its build on ONNX Runtime's own ops, round by round; no upstream columns without upstream
    header = next(line for line in page.splitlines() if line.startswith("| what |"))
    assert header.endswith("| against the same build on ONNX Runtime's own ops, median of the rounds |")
    assert "upstream" not in header
