"""Grid Engine's dialect, kept under this name: it lives in :mod:`hpcgpu.schedulers.sge.dialect`."""

from hpcgpu.schedulers.sge.dialect import SGE_MEMORY_UNITS, SGEDialect

__all__ = ["SGEDialect", "SGE_MEMORY_UNITS"]
