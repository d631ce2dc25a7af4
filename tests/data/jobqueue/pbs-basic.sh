#!/usr/bin/env bash

#PBS -N dask-worker
#PBS -l select=1:ncpus=8:mem=27GB
#PBS -l walltime=00:02:00

PYTHON -m distributed.cli.dask_worker SCHEDULER --name dummy-name --nthreads 2 --memory-limit 6.52GiB --nworkers 4 --nanny --death-timeout 60
