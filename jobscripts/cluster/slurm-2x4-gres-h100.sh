#!/usr/bin/env bash
#SBATCH --job-name=hpcgpu
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4
#SBATCH --gres=gpu:h100:4
#SBATCH --cpus-per-task=8
#SBATCH --mem=240G
#SBATCH --time=01:00:00
#SBATCH --partition=gpu
#SBATCH --account=proj123
#SBATCH --output=logs/%x-%j.out
#SBATCH --error=logs/%x-%j.err

# hpcgpu: 2 node(s) x 4 GPU(s), one Dask worker per GPU, started by srun (one task per node)
srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=32 --kill-on-bad-exit=1 python3 -m hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 8 --memory-limit auto --death-timeout 120 --launcher srun --gpus-per-node 4
