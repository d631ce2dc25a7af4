#!/usr/bin/env bash
#FLUX: --job-name=hpcgpu
#FLUX: --nodes=2
#FLUX: --nslots=8
#FLUX: --cores-per-slot=8
#FLUX: --gpus-per-slot=1
#FLUX: --time-limit=60m
#FLUX: --queue=gpu
#FLUX: --setattr=system.bank=proj123
#FLUX: --output=logs/{{name}}-{{id}}.out
#FLUX: --error=logs/{{name}}-{{id}}.err

# hpcgpu: 2 node(s) x 4 GPU(s), one Dask worker per GPU, started by flux (one task per node)
hpcgpu_python=python3
if ! "$hpcgpu_python" -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import importlib.util as u;raise SystemExit(not (u.find_spec("hpcgpu") and u.find_spec("distributed")))' 2>/dev/null; then
  echo "hpcgpu: $hpcgpu_python ($(command -v "$hpcgpu_python" || echo not found)) on $HOSTNAME has no hpcgpu: the nodes need a python with hpcgpu at that path, or name theirs with python=... (hpcgpu jobscript --python)" >&2
  exit 2
fi
flux run --nodes=2 --ntasks=2 --cores-per-task=32 --gpus-per-task=4 --env=HPCGPU_LOCAL_SIZE=1 python3 -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import runpy;runpy._run_module_as_main(sys.argv.pop(1))' hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 8 --memory-limit auto --death-timeout 120 --launcher flux --gpus-per-node 4
