#!/usr/bin/env bash
# Scaling sweeps on one host with 4 GPUs: 1, 2 and 4 GPUs,
# TCP and UCX, hpcgpu's LocalGPUCluster beside dask-cuda's LocalCUDACluster and plain
# Dask in the same run. Finishes in under ~8 minutes: every sweep has its own time limit
# (SIGINT, so clusters shut down), and each run's record is on disk as soon as it ends.
#
#   OUT=/some/folder bash benchmarks/gpu/run_bench.sh
#
# Needs CuPy, dask-cuda, nvidia-ml-py and, for
# UCX, distributed-ucxx; cuDF/dask-cudf for the dataframe sweep (skipped without them).
# If a .whl/ folder of wheels is there, it is installed to /tmp/site first.
#
# Writes under $OUT: tcp/, ucx/, bootstrap/, frames/ (each: results.jsonl, results.csv,
# table.md, plots/*.png, log.txt) and all/ (every record together: table.md with the
# side-by-side ratios, results.jsonl/csv, plots/<workload>-strong.png).
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to an output folder}"
mkdir -p "$OUT"
if [ -d .whl ] && ! python3 -c "import dask_cuda" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv | tee "$OUT/gpus.csv"
$PY -c "import hpcgpu.cluster.local, hpcgpu.array, cupy, dask_cuda" || { echo "missing hpcgpu.cluster.local/cupy/dask-cuda"; exit 1; }

bench() {  # bench NAME SECONDS ARGS...: one sweep under a time limit, log kept
  local name=$1 limit=$2; shift 2
  echo "== $name: hpcgpu bench $*" | tee "$OUT/$name.cmd"
  timeout -s INT -k 30 "$limit" $PY -m hpcgpu bench "$@" --out "$OUT/$name" >"$OUT/$name.log" 2>&1
  echo "   exit $? after $SECONDS s in all"
}

COMMON=(--gpus 1,2,4 --size medium --repeats 3 --warmup 1 --timeout 60)
bench tcp 230 array-sum,noop,transpose-sum,svd,many-fits "${COMMON[@]}" --protocol tcp \
  --compare dask-cuda,plain --title "1/2/4 GPUs over TCP"
bench ucx 110 array-sum,transpose-sum "${COMMON[@]}" --protocol ucxx --compare dask-cuda \
  --title "1/2/4 GPUs over UCX (distributed-ucxx)"
bench bootstrap 60 bootstrap --gpus 1,2,4 --repeats 2 --warmup 0 --compare dask-cuda \
  --title "worker start-up"
if $PY -c "import cudf, dask_cudf" 2>/dev/null; then
  bench frames 70 groupby,merge,shuffle "${COMMON[@]}" --protocol tcp --compare dask-cuda \
    --title "cuDF workloads over TCP"
else
  echo "== frames: skipped (no cudf/dask_cudf)"
fi

args=()
for f in "$OUT"/*/results.jsonl; do args+=(--from-jsonl "$f"); done
$PY -m hpcgpu bench "${args[@]}" --out "$OUT/all" --title "hpcgpu bench on $(hostname)" >"$OUT/all.log" 2>&1
echo; grep -E "^\| (workload|array-sum|transpose-sum|bootstrap|groupby) " "$OUT/all/table.md" | head -60
echo "done in $SECONDS s; outputs under $OUT (all/table.md, all/plots/*.png)"
