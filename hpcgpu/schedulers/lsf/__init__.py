"""IBM Spectrum LSF: its dialect (:mod:`.dialect`) and its
:class:`~hpcgpu.schedulers.base.Scheduler` (:mod:`.scheduler`)."""

from hpcgpu.schedulers.lsf.scheduler import LSF, SCHEDULER

__all__ = ["LSF", "SCHEDULER"]
