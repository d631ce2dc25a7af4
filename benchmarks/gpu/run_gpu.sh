#!/usr/bin/env bash
# The GPU tests and the GPU benchmark on a machine with GPUs.
# Installs nothing: the Dask stack, dask-cuda, rmm (and cuDF, optionally) must already be
# installed or in /tmp/site (put on PYTHONPATH). Run from the repository root:
#   OUT=/some/dir bash benchmarks/gpu/run_gpu.sh [gpu_perf.py options]
# Writes $OUT/chunk_profile.{json,log}, $OUT/gpu_tests.{txt,xml}, $OUT/gpu_perf.{json,md,log},
# $OUT/demo.{json,log} (hpcgpu demo on this machine).
set -uo pipefail
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
OUT="${OUT:-$PWD/gpu-out}"; export OUT; mkdir -p "$OUT"
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
timeout 60 python3 benchmarks/gpu/chunk_profile.py > "$OUT/chunk_profile.log" 2>&1
echo "chunk profile: exit $?"; cat "$OUT/chunk_profile.log"
timeout 150 python3 -m pytest -m gpu -q -p no:cacheprovider -o addopts="" tests \
  --junitxml "$OUT/gpu_tests.xml" > "$OUT/gpu_tests.txt" 2>&1
echo "gpu tests: exit $?"; tail -5 "$OUT/gpu_tests.txt"
timeout ${PERF_TIMEOUT:-400} python3 benchmarks/gpu_perf.py "$@" 2>&1 | grep -v " INFO " | tee "$OUT/gpu_perf.log" | grep -v "^|"
echo "gpu_perf: exit ${PIPESTATUS[0]}"
timeout ${DEMO_TIMEOUT:-150} python3 -m hpcgpu demo --json "$OUT/demo.json" > "$OUT/demo.log" 2>&1
echo "hpcgpu demo: exit $?"; grep -v " INFO " "$OUT/demo.log" | tail -15
