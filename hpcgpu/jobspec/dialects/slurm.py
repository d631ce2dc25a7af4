"""SLURM's dialect, kept under this name: it lives in :mod:`hpcgpu.schedulers.slurm.dialect`."""

from hpcgpu.schedulers.slurm.dialect import SLURM_MEMORY_UNITS, SlurmDialect, expand_hostlist

__all__ = ["SlurmDialect", "SLURM_MEMORY_UNITS", "expand_hostlist"]
