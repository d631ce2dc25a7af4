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
if ! command -v apptainer >/dev/null; then echo "hpcgpu: apptainer is not on PATH on $HOSTNAME: load its module in job_script_prologue" >&2; exit 2; fi
if ! apptainer exec --nv --bind /scratch,/home/me/.cache/hpcgpu/logs /sw/images/hpcgpu.sif "$hpcgpu_python" -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import importlib.util as u;raise SystemExit(not (u.find_spec("hpcgpu") and u.find_spec("distributed")))'; then
  echo "hpcgpu: image /sw/images/hpcgpu.sif on $HOSTNAME did not start, or its $hpcgpu_python has no hpcgpu: install hpcgpu in the image, or name its python with python=..." >&2
  exit 2
fi
srun --nodes=1 --ntasks=1 --ntasks-per-node=1 --cpus-per-task=32 --kill-on-bad-exit=1 apptainer exec --nv --bind /scratch,/home/me/.cache/hpcgpu/logs /sw/images/hpcgpu.sif python3 -c 'import sys;getattr(sys.flags,"safe_path",0) or sys.path.pop(0);import runpy;runpy._run_module_as_main(sys.argv.pop(1))' hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 8 --memory-limit auto --death-timeout 120 --launcher srun --gpus-per-node 4
