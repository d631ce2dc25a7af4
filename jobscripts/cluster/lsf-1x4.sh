#!/usr/bin/env bash
#BSUB -J hpcgpu
#BSUB -n 4
#BSUB -R "span[ptile=4]"
#BSUB -R "affinity[core(8)]"
#BSUB -gpu "num=4:mode=exclusive_process"
#BSUB -R "rusage[mem=61440]"
#BSUB -M 61440
#BSUB -W 1:00
#BSUB -o logs/%J.out
#BSUB -e logs/%J.err

# hpcgpu: 1 node(s) x 4 GPU(s), one Dask worker per GPU, started by jsrun
jsrun --nrs 4 --rs_per_host 4 --tasks_per_rs 1 --gpu_per_rs 1 --cpu_per_rs 8 --bind packed:8 python3 -m hpcgpu.worker --scheduler-file hpcgpu-scheduler.json --nthreads 8 --memory-limit auto --death-timeout 120 --launcher jsrun
