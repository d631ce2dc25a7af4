#!/usr/bin/env bash

#SBATCH -J dask-worker
#SBATCH -n 1
#SBATCH --cpus-per-task=8
#SBATCH --mem=27G
#SBATCH -t 00:02:00

PYTHON -m distributed.cli.dask_worker SCHEDULER --name dummy-name --nthreads 2 --memory-limit 6.52GiB --nworkers 4 --nanny --death-timeout 60
