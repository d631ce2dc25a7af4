#!/usr/bin/env bash
# GPU check of batch mode on one machine with GPUS GPUs (default 4) and no batch system:
#   1. hpcgpu run --launcher direct   2. hpcgpu run --launcher mpirun   3. mpirun python -m hpcgpu.mpi
# Each must start one worker per GPU, each on its own GPU (checked by UUID from NVML inside
# the worker against CuPy's device and nvidia-smi), and run array-sum with CuPy chunks.
# Results: $OUT/<mode>.json, $OUT/<mode>.log, $OUT/summary.md. Exit 0 when all pass.
#
#   OUT=/path/to/out bash benchmarks/gpu/batch_check.sh        # from the repository root
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to an output folder}"
mkdir -p "$OUT"
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
PY=${PYTHON:-python3}
N=${GPUS:-4}
SIZE=${SIZE:-40000}
CHUNK=${CHUNK:-10000}
W=benchmarks/gpu/batch_workload.py
# TLS (the default) needs 'cryptography'; without it the check runs on plain TCP and says so.
TLS=--tls
"$PY" -c "import cryptography" 2>/dev/null || { TLS=--no-tls; echo "no cryptography: --no-tls" | tee "$OUT/tls.txt"; }
ARGS=(--expect "$N" --out "$OUT" --n "$SIZE" --chunk "$CHUNK")
RUN=("$PY" -m hpcgpu run "$TLS" --gpus-per-node "$N" --work-dir /tmp/hpcgpu-batch-check
     --dashboard-address :0 --timeout 180)
status=0
step() {  # name, command...
  local name=$1; shift
  local start=$SECONDS
  timeout 240 "$@" > "$OUT/$name.log" 2>&1
  local code=$?
  echo "$name: exit $code in $((SECONDS - start)) s" | tee -a "$OUT/steps.txt"
  grep -E "^$name: " "$OUT/$name.log" || tail -n 20 "$OUT/$name.log"
  [ $code = 0 ] || status=1
}
nvidia-smi -L > "$OUT/nvidia-smi.txt" 2>&1
step run-direct "${RUN[@]}" --launcher direct "$W" --mode run-direct "${ARGS[@]}"
step run-mpirun "${RUN[@]}" --launcher mpirun "$W" --mode run-mpirun "${ARGS[@]}"
step mpi mpirun -n "$N" --bind-to none "$PY" -m hpcgpu.mpi "$TLS" --dashboard-address :0 "$W" --mode mpi "${ARGS[@]}"
"$PY" - "$OUT" <<'PYEOF'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = ["| mode | workers | distinct GPU UUIDs | array-sum seconds (repeats) | checks |",
        "| --- | --- | --- | --- | --- |"]
for mode in ("run-direct", "run-mpirun", "mpi"):
    path = out / f"{mode}.json"
    if not path.exists():
        rows.append(f"| {mode} | - | - | - | FAILED (see {mode}.log) |")
        continue
    r = json.loads(path.read_text())
    uuids = {w["uuid"] for w in r["workers"].values()}
    secs = ", ".join(f"{t:.2f}" for t in r["array_sum"]["seconds"])
    ok = "all ok" if all(r["checks"].values()) else ", ".join(k for k, v in r["checks"].items() if not v)
    rows.append(f"| {mode} | {len(r['workers'])} | {len(uuids)} | {secs} | {ok} |")
text = "\n".join(rows) + "\n"
(out / "summary.md").write_text(text)
print(text)
PYEOF
exit $status
