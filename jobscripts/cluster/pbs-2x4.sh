#!/usr/bin/env bash
#PBS -N hpcgpu
#PBS -l select=2:ncpus=32:ngpus=4:mpiprocs=4:ompthreads=8:mem=240gb
#PBS -l place=scatter
#PBS -l walltime=01:00:00
#PBS -q gpu
#PBS -j oe
#PBS -o logs/

# hpcgpu: 2 node(s) x 4 GPU(s), one Dask worker per GPU, started by mpiexec (one task per node)
mpiexec -n 2 --ppn 1 python3 -m hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 8 --memory-limit auto --death-timeout 120 --launcher mpiexec --gpus-per-node 4
