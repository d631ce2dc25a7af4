"""SLURM's environment, kept under this name: it lives in
:mod:`hpcgpu.schedulers.slurm.environment`."""

from hpcgpu.schedulers.slurm.environment import (SLURM_GPU_VARIABLES, _count, _ids,  # noqa: F401
                                                 _min_cpus, _tres_gpus, in_salloc_shell,
                                                 slurm_gpus, slurm_tasks)

__all__ = ["SLURM_GPU_VARIABLES", "slurm_gpus", "slurm_tasks", "in_salloc_shell"]
