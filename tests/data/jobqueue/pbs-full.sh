#!/usr/bin/env bash

#PBS -N dask-worker
#PBS -q workq
#PBS -A proj1
#PBS -l select=1:ncpus=36:mem=120GB:model=bro
#PBS -l walltime=02:00:00
#PBS -e /tmp/hpcgpu-jq-logs/
#PBS -o /tmp/hpcgpu-jq-logs/
#PBS -j oe
module load python
PYTHON -m distributed.cli.dask_worker SCHEDULER --name dummy-name --nthreads 6 --memory-limit 18.63GiB --nworkers 6 --nanny --death-timeout 60
