#!/usr/bin/env bash
#BSUB -n 1
#BSUB -R "span[ptile=1]"
#BSUB -R "affinity[core(2)]"
#BSUB -gpu "num=1:mode=exclusive_process"
#BSUB -W 0:10
#BSUB -J "hpcgpu[1-6]%2"
#BSUB -o logs/%J_%I.out
#BSUB -e logs/%J_%I.err

# hpcgpu: 1 node(s) x 1 GPU(s), one Dask worker per GPU, started by jsrun (one task per node)
hpcgpu_python=python3
if ! "$hpcgpu_python" -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import importlib.util as u;raise SystemExit(not (u.find_spec("hpcgpu") and u.find_spec("distributed")))' 2>/dev/null; then
  echo "hpcgpu: $hpcgpu_python ($(command -v "$hpcgpu_python" || echo not found)) on $HOSTNAME has no hpcgpu: the nodes need a python with hpcgpu at that path, or name theirs with python=... (hpcgpu jobscript --python)" >&2
  exit 2
fi
jsrun --nrs 1 --rs_per_host 1 --tasks_per_rs 1 --gpu_per_rs 1 --cpu_per_rs 2 --bind packed:2 python3 -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import runpy;runpy._run_module_as_main(sys.argv.pop(1))' hpcgpu.worker tls://10.0.0.1:8786 --name 'MyCluster-{array_index+11}' --nthreads 2 --memory-limit auto --death-timeout 120 --launcher jsrun --gpus-per-node 1
