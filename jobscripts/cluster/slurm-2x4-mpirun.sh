#!/usr/bin/env bash
#SBATCH --job-name=hpcgpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --mem=240G
#SBATCH --time=01:00:00
#SBATCH --output=logs/%x-%j.out
#SBATCH --error=logs/%x-%j.err

# hpcgpu: 2 node(s) x 4 GPU(s), one Dask worker per GPU, started by mpirun (one task per node)
hpcgpu_python=python3
if ! "$hpcgpu_python" -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import importlib.util as u;raise SystemExit(not (u.find_spec("hpcgpu") and u.find_spec("distributed")))' 2>/dev/null; then
  echo "hpcgpu: $hpcgpu_python ($(command -v "$hpcgpu_python" || echo not found)) on $HOSTNAME has no hpcgpu: the nodes need a python with hpcgpu at that path, or name theirs with python=... (hpcgpu jobscript --python)" >&2
  exit 2
fi
mpirun -n 2 --map-by ppr:1:node --bind-to none python3 -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import runpy;runpy._run_module_as_main(sys.argv.pop(1))' hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 8 --memory-limit auto --death-timeout 120 --launcher mpirun --gpus-per-node 4
