#!/usr/bin/env bash

#SBATCH -J dask-worker
#SBATCH -n 1
#SBATCH --cpus-per-task=1
#SBATCH --mem=2G
#SBATCH -t 10

PYTHON -m distributed.cli.dask_worker SCHEDULER --name dummy-name --nthreads 1 --memory-limit 1.40GiB --nanny --death-timeout 60
