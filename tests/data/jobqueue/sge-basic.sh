#!/usr/bin/env bash

#$ -N dask-worker
#$ -l h_rt=00:02:00
#$ -cwd
#$ -j y

PYTHON -m distributed.cli.dask_worker SCHEDULER --name dummy-name --nthreads 2 --memory-limit 6.52GiB --nworkers 4 --nanny --death-timeout 60
