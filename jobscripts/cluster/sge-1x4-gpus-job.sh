#!/usr/bin/env bash
#$ -N hpcgpu
#$ -S /bin/bash
#$ -pe smp 4
#$ -l gpus=4
#$ -l mem_free=60G
#$ -l h_rt=01:00:00
#$ -q gpu.q
#$ -cwd
#$ -j y
#$ -o logs/

# hpcgpu: 1 node(s) x 4 GPU(s), one Dask worker per GPU, started by direct (one task per node)
python3 -m hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 8 --memory-limit auto --death-timeout 120 --launcher direct --gpus-per-node 4
