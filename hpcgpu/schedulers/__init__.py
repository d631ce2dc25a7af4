"""Batch schedulers: one :class:`Scheduler` per scheduler, owning everything looked up by
its name, in one folder each (``slurm/``, ``pbs/``, ``lsf/``, ``sge/``, ``flux/``); one registry
(:mod:`.registry`, entry point group ``hpcgpu.schedulers`` for a site's own)."""

from hpcgpu.schedulers.base import Scheduler
from hpcgpu.schedulers.dialect import JOB_STATES, TERMINAL_STATES, Dialect, JobStatus
from hpcgpu.schedulers.registry import detect, get_scheduler, scheduler_names, schedulers

__all__ = ["JOB_STATES", "TERMINAL_STATES", "Dialect", "JobStatus", "Scheduler", "detect",
           "get_scheduler", "scheduler_names", "schedulers"]
