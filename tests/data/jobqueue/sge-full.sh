#!/usr/bin/env bash

#$ -N dask-worker
#$ -q all.q
#$ -P proj1
#$ -l h_vmem=8G,mem_req=8G
#$ -l h_rt=04:00:00
#$ -e /tmp/hpcgpu-jq-logs/
#$ -o /tmp/hpcgpu-jq-logs/
#$ -cwd
#$ -pe smp 8

PYTHON -m distributed.cli.dask_worker SCHEDULER --name dummy-name --nthreads 4 --memory-limit 7.45GiB --nworkers 2 --nanny --death-timeout 60
