"""eval.py --mode fidelity: a build's decisions teacher-forced against upstream fp32 or another build, step by
step; the per-cell maths against a direct computation; bad references in one line."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.scripts import run_main
from helpers.synthesis_inputs import FP32_BUILD

from codes.export.fidelity import cell_tally
from codes.runtime.model.decoding import guided_log_probs


def test_a_cell_tally_is_argmax_agreement_cosine_and_kl():
    rng = np.random.default_rng(0)
    ref = (rng.standard_normal((8, 5, 1025)).astype(np.float32), rng.standard_normal((8, 5, 1025)).astype(np.float32))
    cand = (ref[0] + 0.3 * rng.standard_normal(ref[0].shape).astype(np.float32), ref[1])
    cells = np.zeros((8, 5), bool)
    cells[:, 1:4] = True
    tally = cell_tally(ref, cand, cells, 2.0)
    p = guided_log_probs(ref[0], ref[1], 2.0)[cells][:, :1024].astype(np.float64)
    q = guided_log_probs(cand[0], cand[1], 2.0)[cells][:, :1024].astype(np.float64)
    assert tally.cells == 24 and tally.agree == int((p.argmax(-1) == q.argmax(-1)).sum())
    assert tally.kl == pytest.approx(float(np.maximum((np.exp(p) * (p - q)).sum(-1), 0).sum()), rel=1e-4)
    a, b = ref[0][cells][:, :1024].astype(np.float64), cand[0][cells][:, :1024].astype(np.float64)
    cosine = (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)
    assert tally.cosine == pytest.approx(float(cosine.sum()), rel=1e-6)
    assert cell_tally(ref, ref, cells, 2.0).agree == 24


def test_an_fp32_build_agrees_with_upstream_everywhere(builds):
    result = run_main("eval.py", "--mode", "fidelity", "--model_dir", builds.get(*FP32_BUILD), "--fidelity-steps", "4")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "argmax agreement 100.0% at the first step, 100.0% over 4 steps" in result.stdout
    assert result.stdout.count("\n| ") == 1 + 4  # the separator row and a row a step


def test_an_int8_build_against_the_fp32_build(builds):
    fp32 = builds.get("cpu_fp32")
    result = run_main("eval.py", "--mode", "fidelity", "--model_dir", builds.get("cpu_int8"), "--reference", fp32,
                      "--fidelity-steps", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"fidelity vs cpu_fp32 build ({fp32.name})" in result.stdout


@pytest.mark.parametrize("reference, message", [("nowhere", "not a build folder"), ("tiny-builds", "another model shape")])
def test_a_reference_that_is_no_build_of_the_same_model_is_one_line(builds, tmp_path, reference, message):
    if reference == "tiny-builds":
        import shutil

        other = tmp_path / "other"
        shutil.copytree(builds.get("cpu_fp32"), other)
        manifest = other / "omnivoice_manifest.json"
        manifest.write_text(manifest.read_text().replace('"hidden_size": 64', '"hidden_size": 65'))
        reference = other
    result = run_main("eval.py", "--mode", "fidelity", "--model_dir", builds.get("cpu_int8"), "--reference", reference)
    assert result.returncode == 2 and message in result.stderr and len(result.stderr.strip().splitlines()) == 1
