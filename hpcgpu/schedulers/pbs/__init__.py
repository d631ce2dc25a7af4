"""PBS Pro and OpenPBS: its dialect (:mod:`.dialect`) and its
:class:`~hpcgpu.schedulers.base.Scheduler` (:mod:`.scheduler`)."""

from hpcgpu.schedulers.pbs.scheduler import PBS, SCHEDULER

__all__ = ["PBS", "SCHEDULER"]
