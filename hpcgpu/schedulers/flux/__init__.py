"""Flux: its dialect (:mod:`.dialect`) and the :class:`~hpcgpu.schedulers.base.Scheduler`
that owns everything hpcgpu looks up by the name ``flux``.

GPU workers only (dask-jobqueue has no Flux job); no job arrays (Flux's are separate
submissions, ``flux bulksubmit``); the walltime warning is ``--signal``.
"""

from __future__ import annotations

from typing import Mapping

from hpcgpu.schedulers.base import Scheduler
from hpcgpu.schedulers.flux.dialect import FluxDialect

__all__ = ["Flux", "FluxDialect", "SCHEDULER"]


class Flux(Scheduler):
    """Flux: ``flux batch`` with ``#FLUX:`` directives, ``flux run`` across its nodes.

    >>> SCHEDULER.preemption_lines(120, False), SCHEDULER.in_job({"FLUX_URI": "local:///x"})
    (['--signal=USR1@120s'], True)
    """

    name = "flux"
    dialect_class = FluxDialect
    job_id_variable = "FLUX_JOB_ID"
    batch_launcher = "flux"
    cluster_class = "FluxCluster"

    def preemption_lines(self, signal_before: int | None, requeue: bool) -> list[str]:
        if requeue:
            raise ValueError("Flux does not requeue a batch job: use requeue=False (the cluster "
                             "replaces a job that ends)")
        return [] if signal_before is None else [f"--signal=USR1@{int(signal_before)}s"]

    def in_job(self, env: Mapping[str, str]) -> bool:
        # a batch script (Flux's initial program) has FLUX_URI, its own instance, and no
        # FLUX_JOB_ID: Flux unsets the enclosing instance's job variables
        return bool(env.get("FLUX_URI"))


SCHEDULER = Flux()
