#!/usr/bin/env bash
#PBS -N hpcgpu
#PBS -l select=1:ncpus=32:ngpus=4:mpiprocs=4:ompthreads=8:mem=240gb
#PBS -l place=scatter
#PBS -l walltime=01:00:00
#PBS -j oe
#PBS -o logs/

# hpcgpu: 1 node(s) x 4 GPU(s), one Dask worker per GPU, started by mpiexec (one task per node)
hpcgpu_python=python3
if ! "$hpcgpu_python" -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import importlib.util as u;raise SystemExit(not (u.find_spec("hpcgpu") and u.find_spec("distributed")))' 2>/dev/null; then
  echo "hpcgpu: $hpcgpu_python ($(command -v "$hpcgpu_python" || echo not found)) on $HOSTNAME has no hpcgpu: the nodes need a python with hpcgpu at that path, or name theirs with python=... (hpcgpu jobscript --python)" >&2
  exit 2
fi
mpiexec -n 1 --ppn 1 python3 -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import runpy;runpy._run_module_as_main(sys.argv.pop(1))' hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 8 --memory-limit auto --death-timeout 120 --launcher mpiexec --gpus-per-node 4
