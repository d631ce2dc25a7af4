"""PBS's dialect, kept under this name: it lives in :mod:`hpcgpu.schedulers.pbs.dialect`."""

from hpcgpu.schedulers.pbs.dialect import PBS_MEMORY_UNITS, PBSDialect

__all__ = ["PBSDialect", "PBS_MEMORY_UNITS"]
