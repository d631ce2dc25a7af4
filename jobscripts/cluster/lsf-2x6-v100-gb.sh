#!/usr/bin/env bash
#BSUB -J hpcgpu
#BSUB -n 12
#BSUB -R "span[ptile=6]"
#BSUB -R "affinity[core(7)]"
#BSUB -gpu "num=6:mode=exclusive_process:gmodel=TeslaV100_SXM2_16GB"
#BSUB -R "rusage[mem=60]"
#BSUB -M 60
#BSUB -W 1:00
#BSUB -P abc123
#BSUB -o logs/%J.out
#BSUB -e logs/%J.err

# hpcgpu: 2 node(s) x 6 GPU(s), one Dask worker per GPU, started by jsrun (one task per node)
hpcgpu_python=python3
if ! "$hpcgpu_python" -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import importlib.util as u;raise SystemExit(not (u.find_spec("hpcgpu") and u.find_spec("distributed")))' 2>/dev/null; then
  echo "hpcgpu: $hpcgpu_python ($(command -v "$hpcgpu_python" || echo not found)) on $HOSTNAME has no hpcgpu: the nodes need a python with hpcgpu at that path, or name theirs with python=... (hpcgpu jobscript --python)" >&2
  exit 2
fi
jsrun --nrs 2 --rs_per_host 1 --tasks_per_rs 1 --gpu_per_rs 6 --cpu_per_rs 42 --bind packed:42 python3 -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import runpy;runpy._run_module_as_main(sys.argv.pop(1))' hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 7 --memory-limit auto --death-timeout 120 --launcher jsrun --gpus-per-node 6
