"""The dialect base, kept under this name: it lives in :mod:`hpcgpu.schedulers.dialect`."""

from hpcgpu.schedulers.dialect import JOB_STATES, TERMINAL_STATES, Dialect, JobStatus, optional_lines

__all__ = ["Dialect", "JOB_STATES", "JobStatus", "TERMINAL_STATES", "optional_lines"]
