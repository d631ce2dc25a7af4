"""Scaling a GPU cluster in whole jobs: ``scale(gpus=|jobs=)``, ``adapt``, retirement.

A mixin of :class:`hpcgpu.cluster.GPUCluster`; it relies on the cluster's shape
(``gpus_per_job``), its job records and dask-jobqueue's ``worker_spec`` of one entry per job.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

from distributed.core import Status
from distributed.deploy.spec import SpecCluster
from distributed.utils import NoOpAwaitable

from hpcgpu.cluster.adaptive import GPUAdaptive

__all__ = ["JobScaling"]

logger = logging.getLogger("hpcgpu.cluster")


class JobScaling:
    """``scale``, ``adapt`` and ``scale_down`` that count GPUs and act on whole jobs."""

    def scale(self, n: int | None = None, jobs: int = 0, memory: Any = None,
              cores: Any = None, *, gpus: int | None = None):
        """Scale to ``gpus`` GPU workers (rounded up to whole jobs) or to ``jobs`` jobs.

        ``n`` is a worker count, as in dask-jobqueue: the same as ``gpus``.
        """
        if memory is not None or cores is not None:
            raise ValueError("scale by gpus= or jobs= (memory= and cores= follow from the shape)")
        gpus = n if gpus is None else gpus
        if gpus is not None:
            if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
                raise ValueError(f"gpus={gpus!r} must be a whole number >= 0")
            jobs = math.ceil(gpus / self.gpus_per_job)
            if jobs * self.gpus_per_job != gpus:
                message = (
                    f"scale(gpus={gpus}) rounds up to {jobs} job(s) = "
                    f"{jobs * self.gpus_per_job} GPUs ({self.gpus_per_job} per job)"
                )
                logger.warning(message)
                warnings.warn(message, stacklevel=2)
        # With the scheduler in a job, that job's GPUs count as the first ones.
        jobs = max(jobs - int(self._setup.scheduler_in_job), 0)
        self._target_jobs = jobs
        self._scale_jobs(jobs)
        self.loop.add_callback(self._correct_state)
        if self.asynchronous:
            return NoOpAwaitable()

    def _scale_jobs(self, jobs: int) -> None:
        if len(self.worker_spec) > jobs:
            connected = self.connected_by_job()
            # Drop jobs whose workers have not connected first, newest first.
            order = sorted(reversed(list(self.worker_spec)), key=lambda j: bool(connected.get(j)))
            for job in order[: len(self.worker_spec) - jobs]:
                del self.worker_spec[job]
        if self.status in (Status.closing, Status.closed):
            return
        if len(self.worker_spec) < jobs and len(self.failures) >= self._max_failed_jobs:
            logger.error("not submitting jobs: %d failed to start (max_failed_jobs=%d)",
                         len(self.failures), self._max_failed_jobs)
            return
        while len(self.worker_spec) < jobs:
            self.worker_spec.update(self.new_worker_spec())

    def new_worker_spec(self) -> dict:
        """The next job's spec, under a name never used before in this cluster (a replaced
        job's workers must not take the names of the dead ones)."""
        name = self._new_worker_name(self._i)
        while name in self.worker_spec or name in self._records:
            self._i += 1
            name = self._new_worker_name(self._i)
        return {name: self.new_spec}

    async def retire_jobs(self, jobs: list[str]) -> None:
        """Retire every worker of ``jobs`` (their data moves first), then cancel the jobs."""
        for job in jobs:
            self.worker_spec.pop(job, None)
            if job in self._records:
                self._records[job].retiring = False  # asked for: retire it now
        self._target_jobs = len(self.worker_spec)
        await self._correct_state()

    async def scale_down(self, workers):
        """Remove the jobs of ``workers`` (worker or job names): always whole jobs."""
        from hpcgpu.cluster.adaptive import job_of_worker

        jobs = {w if w in self.worker_spec else job_of_worker(w) for w in workers}
        await self.retire_jobs(sorted(jobs))

    def adapt(self, *, minimum_gpus: int | None = None, maximum_gpus: int | None = None,
              minimum_jobs: int | None = None, maximum_jobs: int | None = None,
              minimum: int | None = None, maximum: int | None = None, **kwargs: Any):
        """Scale between a minimum and maximum number of GPUs (or jobs) with the load.

        GPU counts are whole jobs: the minimum rounds up, the maximum down.
        """
        g = self.gpus_per_job
        low = minimum_gpus if minimum_gpus is not None else minimum
        high = maximum_gpus if maximum_gpus is not None else maximum
        low_jobs = minimum_jobs if minimum_jobs is not None else math.ceil((low or 0) / g)
        high_jobs = maximum_jobs if maximum_jobs is not None else (
            math.inf if high is None else high // g)
        if high_jobs < 1 or high_jobs < low_jobs:
            raise ValueError(
                f"adapt(maximum_gpus={high}, maximum_jobs={maximum_jobs}) allows no whole job "
                f"of {g} GPUs at or above the minimum of {low_jobs} job(s): raise the maximum"
            )
        maximum_workers = high_jobs * g if high_jobs != math.inf else math.inf
        return SpecCluster.adapt(
            self, Adaptive=GPUAdaptive, gpus_per_job=g, minimum=low_jobs * g,
            maximum=maximum_workers, **kwargs,
        )
