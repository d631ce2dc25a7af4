"""(Son of) Grid Engine: its dialect (:mod:`.dialect`) and its
:class:`~hpcgpu.schedulers.base.Scheduler` (:mod:`.scheduler`)."""

from hpcgpu.schedulers.sge.scheduler import SCHEDULER, SGE

__all__ = ["SCHEDULER", "SGE"]
