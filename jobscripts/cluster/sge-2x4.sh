#!/usr/bin/env bash
#$ -N hpcgpu
#$ -S /bin/bash
#$ -pe mpi-4 8
#$ -l gpu=1
#$ -l h_vmem=60G
#$ -l h_rt=01:00:00
#$ -cwd
#$ -j y
#$ -o logs/

# hpcgpu: 2 node(s) x 4 GPU(s), one Dask worker per GPU, started by mpirun (one task per node)
mpirun -n 2 --map-by ppr:1:node --bind-to none python3 -m hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 8 --memory-limit auto --death-timeout 120 --launcher mpirun --gpus-per-node 4
