"""LSF's dialect, kept under this name: it lives in :mod:`hpcgpu.schedulers.lsf.dialect`."""

from hpcgpu.schedulers.lsf.dialect import LSF_UNITS, LSFDialect

__all__ = ["LSFDialect", "LSF_UNITS"]
