#!/bin/bash

#SBATCH -J analysis
#SBATCH -e /tmp/hpcgpu-jq-logs/analysis-%J.err
#SBATCH -o /tmp/hpcgpu-jq-logs/analysis-%J.out
#SBATCH -p regular
#SBATCH -A proj1
#SBATCH -n 1
#SBATCH --cpus-per-task=20
#SBATCH -t 01:30:00
#SBATCH --exclusive
#SBATCH --constraint=skylake
module load python
source activate env
PYTHON -m distributed.cli.dask_worker SCHEDULER --name dummy-name --nthreads 8 --memory-limit 46.57GiB --nworkers 2 --nanny --death-timeout 30 --local-directory $TMPDIR --lifetime 55m --lifetime-stagger 4m --interface lo
