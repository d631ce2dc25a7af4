#!/usr/bin/env bash
#SBATCH --job-name=hpcgpu
#SBATCH --nodes=1
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --mem=240G
#SBATCH --time=01:00:00
#SBATCH --output=logs/%x-%j.out
#SBATCH --error=logs/%x-%j.err

# hpcgpu: 1 node(s) x 4 GPU(s), one Dask worker per GPU, started by srun (one task per node)
hpcgpu_python=python3
if ! "$hpcgpu_python" -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import importlib.util as u;raise SystemExit(not (u.find_spec("hpcgpu") and u.find_spec("distributed")))' 2>/dev/null; then
  echo "hpcgpu: $hpcgpu_python ($(command -v "$hpcgpu_python" || echo not found)) on $HOSTNAME has no hpcgpu: the nodes need a python with hpcgpu at that path, or name theirs with python=... (hpcgpu jobscript --python)" >&2
  exit 2
fi
srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=32 --kill-on-bad-exit=1 python3 -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import runpy;runpy._run_module_as_main(sys.argv.pop(1))' hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 8 --memory-limit auto --death-timeout 120 --launcher srun --gpus-per-node 4 --device-memory-limit 50GB --enable-cudf-spill --rmm-pool-size 40GB --rmm-maximum-pool-size 70GB --set-rmm-allocator-for-libs cupy --rmm-log-directory logs/rmm --pre-import cudf,rmm
