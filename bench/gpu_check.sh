#!/usr/bin/env bash
# The GPU check, for a machine with CUDA: under 5 minutes on the tiny model.
#   1. builds the `gpu` profile (fp16, CUDA EP) with the codec;
#   2. eval.py --mode equiv on CUDA: fp16 graphs vs upstream, and the bidirectionality probe
#      (answers whether the CUDA GQA kernel honours causal=0);
#   3. eval.py --mode rtf, smoke workload, CUDA vs CPU, written to $OUT/gpu_smoke.{md,json}.
# Needs the build environment (`make setup`) with onnxruntime-gpu (same version) instead of onnxruntime.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench}
mkdir -p "$OUT"
$PY -c "import onnxruntime as o, sys; p = o.get_available_providers(); print(o.__version__, p); sys.exit('CUDAExecutionProvider' not in p)"
$PY optimize.py --model tiny-random --device gpu --include-higgs --output models/tiny-gpu --overwrite
$PY eval.py --mode equiv --model_dir models/tiny-gpu --provider cuda | tee "$OUT/gpu_equiv.txt"
$PY eval.py --mode rtf --model_dir models/tiny-gpu --provider cuda --workload smoke --repeats 3 --no-memory \
    --out "$OUT/gpu_smoke"
# FULL=1: also the full-size `gpu` build's decoding step at batch 1, 8 and 32, run each way (numpy, graph,
# device), with the backbone's own time beside it; written to $OUT/gpu_step.{md,json}.
if [ "${FULL:-0}" = 1 ]; then
    $PY optimize.py --model full-random --device gpu --output models/full-gpu --overwrite
    $PY eval.py --mode rtf --model_dir models/full-gpu --provider cuda --workload 10s --num_steps 4 --repeats 3 \
        --warmup 1 --no-memory --no-profile --step-batches 1 8 32 --out "$OUT/gpu_step"
fi
