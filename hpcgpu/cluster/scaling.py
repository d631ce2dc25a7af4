"""Scaling a GPU cluster in whole jobs: ``scale(gpus=|jobs=)``, ``adapt``, retirement.

A mixin of :class:`hpcgpu.cluster.GPUCluster`; it relies on the cluster's shape
(``gpus_per_job``), its job records and dask-jobqueue's ``worker_spec`` of one entry per job.
"""

from __future__ import annotations

import logging
import math
import warnings
from typing import Any

from dask.utils import parse_bytes
from distributed.core import Status
from distributed.deploy.spec import SpecCluster
from distributed.utils import NoOpAwaitable

from hpcgpu.cluster.adaptive import GPUAdaptive
from hpcgpu.cluster.pools import DEFAULT_POOL

__all__ = ["JobScaling", "job_bounds", "jobs_for"]

logger = logging.getLogger("hpcgpu.cluster")


class JobScaling:
    """``scale``, ``adapt`` and ``scale_down`` that count GPUs and act on whole jobs."""

    def scale(self, n: int | None = None, jobs: int = 0, memory: Any = None,
              cores: Any = None, *, gpus: int | None = None, pool: str | None = None):
        """Scale to ``n`` workers (``gpus`` GPU workers), ``jobs`` jobs, or enough jobs for
        ``cores`` cores and ``memory`` bytes, as dask-jobqueue: whole jobs, rounded up,
        the largest of the counts asked for.

        ``pool``: the pool to scale (default: the default pool, the cluster's own
        arguments); the other pools keep their jobs.
        """
        if not getattr(self, "_pools", None):
            return None  # the scheduler failed to start within __init__: no job to scale
        the_pool = self._pool(pool)
        workers = n if gpus is None else gpus
        per_job = the_pool.workers_per_job
        if gpus is not None and the_pool.cpu:
            raise ValueError(f"scale(gpus={gpus}, pool={the_pool.name!r}): that pool has CPU "
                             "workers only: use jobs= or n= (workers)")
        if workers is not None:
            if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
                what = "n" if gpus is None else "gpus"
                raise ValueError(f"{what}={workers!r} must be a whole number >= 0")
            jobs = math.ceil(workers / per_job)
            if jobs * per_job != workers and not the_pool.cpu:
                message = (
                    f"scale(gpus={workers}) rounds up to {jobs} job(s) = "
                    f"{jobs * per_job} GPUs ({per_job} per job)"
                )
                logger.warning(message)
                warnings.warn(message, stacklevel=2)
        jobs = max(jobs, jobs_for(the_pool.shape, cores=cores, memory=memory))
        # With the scheduler in a job, that job's GPUs count as the first ones.
        if the_pool.name == DEFAULT_POOL:
            jobs = max(jobs - int(self._setup.scheduler_in_job), 0)
        self._targets[the_pool.name] = jobs
        self._scale_jobs(jobs, the_pool.name)
        self.loop.add_callback(self._correct_state)
        if self.asynchronous:
            return NoOpAwaitable()

    def _scale_jobs(self, jobs: int, pool: str = DEFAULT_POOL) -> None:
        """Add or drop jobs of ``pool`` until it has ``jobs``."""
        have = self._jobs_of(pool)
        if len(have) > jobs:
            connected = self.connected_by_job()
            # Drop jobs whose workers have not connected first, newest first.
            order = sorted(reversed(have), key=lambda j: bool(connected.get(j)))
            for job in order[: len(have) - jobs]:
                del self.worker_spec[job]
        if self.status in (Status.closing, Status.closed):
            return
        if len(have) < jobs and len(self.failures) >= self._max_failed_jobs:
            logger.error("not submitting jobs: %d failed to start (max_failed_jobs=%d)",
                         len(self.failures), self._max_failed_jobs)
            return
        for _ in range(jobs - len(have)):
            self.worker_spec.update(self.new_worker_spec(pool))

    def new_worker_spec(self, pool: str = DEFAULT_POOL) -> dict:
        """The next job's spec, under a name never used before in this cluster (a replaced
        job's workers must not take the names of the dead ones): ``<cluster>-<n>``, or
        ``<cluster>-<pool>-<n>`` for a named pool."""
        prefix = "" if pool == DEFAULT_POOL else f"{pool}-"
        name = self._new_worker_name(f"{prefix}{self._i}")
        while name in self.worker_spec or name in self._records:
            self._i += 1
            name = self._new_worker_name(f"{prefix}{self._i}")
        self._pool_of.setdefault(name, pool)
        return {name: self._pools[pool].spec}

    async def retire_jobs(self, jobs: list[str]) -> None:
        """Retire every worker of ``jobs`` (their data moves first), then cancel the jobs."""
        for job in jobs:
            self.worker_spec.pop(job, None)
            if job in self._records:
                self._records[job].retiring = False  # asked for: retire it now
        self._targets = {pool: len(self._jobs_of(pool)) for pool in self._pools}
        await self._correct_state()

    async def scale_down(self, workers):
        """Remove the jobs of ``workers`` (worker or job names): always whole jobs."""
        jobs = {w if w in self.worker_spec else self.job_key(w) for w in workers}
        await self.retire_jobs(sorted(jobs))

    def adapt(self, *, minimum_gpus: int | None = None, maximum_gpus: int | None = None,
              minimum_jobs: int | None = None, maximum_jobs: int | None = None,
              minimum: int | None = None, maximum: int | None = None,
              minimum_cores: Any = None, maximum_cores: Any = None,
              minimum_memory: Any = None, maximum_memory: Any = None,
              pools: dict[str, dict] | None = None, **kwargs: Any):
        """Scale between a minimum and maximum number of workers (GPUs), jobs, cores or
        memory with the load. Counts are whole jobs: minimums round up, maximums down.

        In a cluster with pools, the bounds above are the default pool's, and ``pools``
        gives other pools theirs (the same names: ``{"cpu": dict(maximum_jobs=2)}``);
        each adapted pool grows from the tasks only its workers can run, pools not named
        keep the jobs ``scale`` gave them (:mod:`hpcgpu.cluster.pooladapt`).
        """
        bounds = dict(minimum_gpus=minimum_gpus, maximum_gpus=maximum_gpus,
                      minimum_jobs=minimum_jobs, maximum_jobs=maximum_jobs, minimum=minimum,
                      maximum=maximum, minimum_cores=minimum_cores, maximum_cores=maximum_cores,
                      minimum_memory=minimum_memory, maximum_memory=maximum_memory)
        if len(self._pools) > 1:
            return self._adapt_pools(bounds, pools or {}, kwargs)
        if pools:
            raise ValueError("adapt(pools=...) needs a cluster made with pools=")
        g = self.workers_per_job
        low_jobs, high_jobs = job_bounds(self._pools[DEFAULT_POOL], **bounds)
        maximum_workers = high_jobs * g if high_jobs != math.inf else math.inf
        return SpecCluster.adapt(
            self, Adaptive=GPUAdaptive, gpus_per_job=g, job_key=self.job_key,
            minimum=low_jobs * g, maximum=maximum_workers, **kwargs,
        )

    def _adapt_pools(self, bounds: dict, pools: dict, kwargs: dict):
        from hpcgpu.cluster.pooladapt import PoolAdaptive

        per_pool = {DEFAULT_POOL: job_bounds(self._pools[DEFAULT_POOL], **bounds)}
        for name, given in pools.items():
            pool = self._pool(name)
            unknown = set(given) - set(bounds) if isinstance(given, dict) else {"?"}
            if unknown or name == DEFAULT_POOL:
                raise ValueError(f"adapt(pools={{{name!r}: {given!r}}}): give a dict of "
                                 f"{', '.join(bounds)} for a named pool (the default "
                                 "pool's bounds are adapt's own arguments)")
            per_pool[name] = job_bounds(pool, **given)
        return SpecCluster.adapt(self, Adaptive=PoolAdaptive, bounds=per_pool,
                                 job_key=self.job_key, **kwargs)


def job_bounds(pool: Any, *, minimum_gpus=None, maximum_gpus=None, minimum_jobs=None,
               maximum_jobs=None, minimum=None, maximum=None, minimum_cores=None,
               maximum_cores=None, minimum_memory=None, maximum_memory=None) -> tuple:
    """``(minimum jobs, maximum jobs)`` of ``pool`` for adapt's bounds (in workers, GPUs,
    jobs, cores or memory): minimums round up to whole jobs, maximums down."""
    g = pool.workers_per_job
    low = minimum_gpus if minimum_gpus is not None else minimum
    high = maximum_gpus if maximum_gpus is not None else maximum
    low_jobs = minimum_jobs if minimum_jobs is not None else max(
        math.ceil((low or 0) / g),
        jobs_for(pool.shape, cores=minimum_cores, memory=minimum_memory))
    high_jobs = maximum_jobs if maximum_jobs is not None else min(
        math.inf if high is None else high // g,
        jobs_for(pool.shape, cores=maximum_cores, memory=maximum_memory, up=False))
    if high_jobs < 1 or high_jobs < low_jobs:
        raise ValueError(
            f"adapt(maximum={high}, maximum_jobs={maximum_jobs}) allows no whole job "
            f"of {g} workers at or above the minimum of {low_jobs} job(s): raise the maximum"
        )
    return low_jobs, high_jobs


def jobs_for(shape: Any, *, cores: Any = None, memory: Any = None, up: bool = True):
    """Jobs of ``shape`` that hold ``cores`` cores and ``memory`` (rounded up; down for a
    maximum, ``up=False``, where nothing asked gives infinity).

    >>> from hpcgpu.jobspec.cpushape import CPUJobShape
    >>> shape = CPUJobShape(cores=8, processes=4, memory=28 * 10**9)
    >>> jobs_for(shape, cores=20), jobs_for(shape, memory="60GB"), jobs_for(shape)
    (3, 3, 0)
    >>> jobs_for(shape, cores=20, up=False)
    2
    """
    counts = []  # (asked, per job) as whole numbers: exact for any size
    if cores is not None:
        counts.append((int(cores), shape.cores_per_job))
    if memory is not None:
        if not shape.memory_per_job:
            raise ValueError("scale(memory=) needs a memory request: set memory_per_gpu or "
                             "memory_per_node (GPU) or memory (CPU workers)")
        counts.append((int(parse_bytes(memory)), int(shape.memory_per_job)))
    if up:
        return max((-(-asked // per) for asked, per in counts), default=0)
    return min((asked // per for asked, per in counts), default=math.inf)
