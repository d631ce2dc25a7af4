#!/usr/bin/env bash
# One graph in every mode (#40's confirmation set): benchmarks/gpu/modes.py on 1, 2 and 4 GPUs
# (GPUS), each count in every mode: LocalGPUCluster, dask-cuda's LocalCUDACluster, a plain
# Client to a `dask scheduler` process with hpcgpu workers (scheduler_in_job's shape),
# `hpcgpu run --launcher direct` and `mpirun python -m hpcgpu.mpi`. Rows: $OUT/modes.jsonl.
#
#   OUT=/folder bash benchmarks/gpu/run_modes.sh           # on a GPU machine, repository root
#   OUT=/folder SMOKE=1 GPUS=2 bash benchmarks/gpu/run_modes.sh   # tiny, on the CPU
set -uo pipefail
cd "$(dirname "$0")/../.."
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
: "${OUT:?set OUT to an output folder}"
mkdir -p "$OUT"
ROWS=$OUT/modes.jsonl M=benchmarks/gpu/modes.py EXTRA=${SMOKE:+--smoke}
step() {  # name, command...: one mode's run, its log kept, its summary line shown
  local name=$1; shift
  timeout "${STEP_TIMEOUT:-150}" "$@" > "$OUT/$name.log" 2>&1
  echo "$name: exit $? $(grep -E 'GPU\(s\) over' "$OUT/$name.log" | tail -1)"
}
plain() {  # GPUs, devices: a dask scheduler process, hpcgpu workers, a plain distributed.Client
  local file=$OUT/plain-$1.scheduler.json; rm -f "$file"
  python3 -m distributed.cli.dask_scheduler --host 127.0.0.1 --port 0 --no-dashboard \
    --scheduler-file "$file" > "$OUT/plain-$1.scheduler.log" 2>&1 & local scheduler=$!
  for _ in $(seq 300); do [ -s "$file" ] && break; sleep 0.1; done
  CUDA_VISIBLE_DEVICES=$2 python3 -m hpcgpu.worker --scheduler-file "$file" --gpus-per-node all \
    > "$OUT/plain-$1.workers.log" 2>&1 & local workers=$!
  STEP_TIMEOUT=${STEP_TIMEOUT:-150} step "plain-$1" python3 $M plain --gpus "$1" --out "$ROWS" $EXTRA \
    --address "$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['address'])" "$file")"
  kill "$workers"; wait "$workers" 2>/dev/null; kill "$scheduler"; wait "$scheduler" 2>/dev/null
}
for gpus in ${GPUS:-1 2 4}; do
  devices=$(seq -s, 0 $((gpus - 1)))
  step "local-$gpus" python3 $M local --gpus "$gpus" --out "$ROWS" $EXTRA
  [ -z "${SMOKE:-}" ] && step "dask-cuda-$gpus" python3 $M dask-cuda --gpus "$gpus" --out "$ROWS"
  step "run-$gpus" env CUDA_VISIBLE_DEVICES="$devices" python3 -m hpcgpu run --launcher direct \
    --dashboard-address :0 $M run --gpus "$gpus" --out "$ROWS" $EXTRA
  step "mpi-$gpus" env CUDA_VISIBLE_DEVICES="$devices" mpirun -n "$gpus" --bind-to none --oversubscribe \
    python3 -m hpcgpu.mpi --dashboard-address :0 $M mpi --gpus "$gpus" --out "$ROWS" $EXTRA
  plain "$gpus" "$devices"
done
