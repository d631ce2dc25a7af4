#!/usr/bin/env bash
# Communication benchmark on one host with 4 GPUs (NVLink between them):
# transpose-sum (40000^2, 5000^2 chunks) and point-to-point bandwidth, hpcgpu's GPU workers
# over UCX (auto, RMM pool, explicit nvlink) and over the TCP fallback, beside dask-cuda's
# LocalCUDACluster over UCX and TCP, in one run. Under 6 minutes: each case has a time limit
# and the whole run a budget (cases left over are reported as skipped).
#
#   OUT=/some/folder bash benchmarks/gpu/run_comms.sh
#
# Needs CuPy, nvidia-ml-py, the Dask stack, dask-cuda and distributed-ucxx (installed, or as
# wheels in .whl/). Writes $OUT/comms.json, $OUT/comms.md,
# $OUT/case-*.json and $OUT/case-*.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
: "${OUT:?set OUT to an output folder}"
mkdir -p "$OUT"
if [ -d .whl ] && ! python3 -c "import dask_cuda, distributed_ucxx" 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH="/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
nvidia-smi topo -m | tee "$OUT/topo.txt"
$PY -c "import cupy, dask_cuda, distributed_ucxx, dask, distributed; print('dask', dask.__version__, \
'distributed', distributed.__version__, 'dask-cuda', dask_cuda.__version__, 'distributed-ucxx', \
distributed_ucxx.__version__, 'cupy', cupy.__version__)" | tee "$OUT/versions.txt" || exit 1
$PY -m hpcgpu doctor --protocol ucx --role compute --json --output "$OUT/doctor.json" >/dev/null
$PY -m hpcgpu doctor --protocol ucx --role compute || true
timeout -k 20 330 $PY benchmarks/comms.py --out "$OUT" --gpus 4 --size 40000 --chunk 5000 \
  --repeat 3 --warmup 1 --p2p-sizes 1MiB,16MiB,256MiB,1GiB --interface lo \
  --case-timeout 110 --budget 300
