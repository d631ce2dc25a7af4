#!/usr/bin/env bash

#BSUB -J dask-worker
#BSUB -e /tmp/hpcgpu-jq-logs/dummy-name-%J.err
#BSUB -o /tmp/hpcgpu-jq-logs/dummy-name-%J.out
#BSUB -q general
#BSUB -P "proj1"
#BSUB -n 24
#BSUB -R "span[hosts=1]"
#BSUB -M 70
#BSUB -W 01:30
#BSUB -R "select[mem>64000]"

PYTHON -m distributed.cli.dask_worker SCHEDULER --name dummy-name --nthreads 8 --memory-limit 29.80GiB --nworkers 2 --nanny --death-timeout 60
