#!/usr/bin/env bash
# Users' published GPU code on a GPU machine: the GPU tests (hpcgpu's side, one import
# changed) and/or the benchmark beside dask-cuda (benchmarks/published_code.py).
#
#   OUT=/some/dir bash benchmarks/gpu/run_published.sh tests
#   OUT=/some/dir bash benchmarks/gpu/run_published.sh bench [published_code.py options; default --quick]
#
# Needs CuPy, dask-cuda, rmm, nvidia-ml-py (cuDF/dask-cuDF for the dataframe step, which
# is skipped, saying so, without them). A .whl/ folder of wheels is installed to /tmp/site.
# Writes $OUT/gpus.txt, $OUT/published_code_tests.{txt,xml} (tests),
# $OUT/published_code.{json,md,log} (bench).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to an output folder}"
mkdir -p "$OUT"
WHAT=${1:-tests}; shift || true
if [ -d .whl ] && ! python3 -c "import dask_cuda" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader | tee "$OUT/gpus.txt"
python3 -c "import cupy, dask_cuda, rmm, hpcgpu.cluster.local" || { echo "missing CuPy, dask-cuda or rmm"; exit 1; }
python3 -c "import cudf, dask_cudf" 2>/dev/null || echo "cuDF/dask-cuDF not importable: the dataframe step skips"
case $WHAT in
  tests)
    timeout "${TEST_TIMEOUT:-540}" python3 -m pytest -p no:cacheprovider -o addopts="" -m gpu -q -rs \
      tests/gpu/test_published_code.py --junitxml "$OUT/published_code_tests.xml" > "$OUT/published_code_tests.txt" 2>&1
    status=$?; echo "published-code tests: exit $status"; tail -25 "$OUT/published_code_tests.txt" ;;
  bench)
    [ $# -gt 0 ] || set -- --quick
    timeout "${BENCH_TIMEOUT:-560}" python3 benchmarks/published_code.py "$@" --out "$OUT" 2>&1 \
      | grep -v " INFO " > "$OUT/published_code.log"
    status=${PIPESTATUS[0]}; echo "published_code.py: exit $status"; cat "$OUT/published_code.md" ;;
  *) echo "usage: OUT=dir bash $0 tests|bench [options]"; exit 2 ;;
esac
exit "$status"
