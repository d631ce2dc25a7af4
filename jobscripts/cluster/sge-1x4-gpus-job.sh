#!/usr/bin/env bash
#$ -N hpcgpu
#$ -S /bin/bash
#$ -pe smp 4
#$ -l gpus=4
#$ -l mem_free=60G
#$ -l h_rt=01:00:00
#$ -q gpu.q
#$ -cwd
#$ -j y
#$ -o logs/

# hpcgpu: 1 node(s) x 4 GPU(s), one Dask worker per GPU, started by direct (one task per node)
hpcgpu_python=python3
if ! "$hpcgpu_python" -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import importlib.util as u;raise SystemExit(not (u.find_spec("hpcgpu") and u.find_spec("distributed")))' 2>/dev/null; then
  echo "hpcgpu: $hpcgpu_python ($(command -v "$hpcgpu_python" || echo not found)) on $HOSTNAME has no hpcgpu: the nodes need a python with hpcgpu at that path, or name theirs with python=... (hpcgpu jobscript --python)" >&2
  exit 2
fi
python3 -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import runpy;runpy._run_module_as_main(sys.argv.pop(1))' hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 8 --memory-limit auto --death-timeout 120 --launcher direct --gpus-per-node 4
