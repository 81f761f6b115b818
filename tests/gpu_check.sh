#!/usr/bin/env bash
# The GPU check of issue 11, for a session that is lent a CUDA machine: the tests
# marked `cuda` (CUDA graphs of the decode step, bfloat16 and int8 exactness against a
# recompute), then the bench on the GPU in bfloat16. Never run yet (written without a
# GPU). Usage: bash tests/gpu_check.sh [python]   (a CUDA build of torch must be there)
set -u
PY=${1:-python}
OUT=${OUT:-.}
"$PY" -c "import torch; print(torch.__version__, torch.cuda.get_device_name(0))" || exit 1
"$PY" -m pytest -q -m cuda tests/engine/test_step.py 2>&1 | tail -20 | tee "$OUT/cuda_tests.txt"
"$PY" -m pytest -q -x tests/engine/test_operations.py tests/engine/test_quant.py 2>&1 | tail -5
"$PY" -m loomterm.cli bench --device cuda --dtype bfloat16 --quick --json "$OUT/bench_cuda.json" \
  2>&1 | tee "$OUT/bench_cuda.txt"
