#!/usr/bin/env bash
#$ -N hpcgpu
#$ -S /bin/bash
#$ -pe smp 1
#$ -l gpu=1
#$ -l h_rt=00:10:00
#$ -cwd
#$ -j y
#$ -o logs/
#$ -t 1-6
#$ -tc 2

# hpcgpu: 1 node(s) x 1 GPU(s), one Dask worker per GPU, started by direct (one task per node)
python3 -m hpcgpu.worker tls://10.0.0.1:8786 --name 'MyCluster-{array_index+11}' --nthreads 2 --memory-limit auto --death-timeout 120 --launcher direct --gpus-per-node 1
