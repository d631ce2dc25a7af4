#!/usr/bin/env bash

#BSUB -J dask-worker
#BSUB -n 8
#BSUB -R "span[hosts=1]"
#BSUB -M 28000
#BSUB -W 00:02

PYTHON -m distributed.cli.dask_worker SCHEDULER --name dummy-name --nthreads 2 --memory-limit 6.52GiB --nworkers 4 --nanny --death-timeout 60
