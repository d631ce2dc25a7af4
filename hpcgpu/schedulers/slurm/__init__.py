"""SLURM: its dialect (:mod:`.dialect`), its environment (:mod:`.environment`) and the
:class:`~hpcgpu.schedulers.base.Scheduler` that owns them (:mod:`.scheduler`)."""

from hpcgpu.schedulers.slurm.scheduler import SCHEDULER, Slurm

__all__ = ["SCHEDULER", "Slurm"]
