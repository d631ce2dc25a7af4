"""GPU jobs and CPU jobs: one protocol, two implementations, chosen by the job shape's type.

A pool's jobs start one GPU worker per GPU (hpcgpu's own job script) or dask-jobqueue's CPU
workers. What the cluster's parts do differently for them (the job class, its workers' names,
what a worker advertises, its threads, where its job's standard error goes, whether
``scale(gpus=)`` applies) is asked of the pool's :class:`JobKind` instead of testing a flag
in each part.
"""

from __future__ import annotations

import logging
import math
import warnings
from dataclasses import dataclass
from typing import Any, Protocol

from hpcgpu.cluster.batch.cpu_job import cpu_error_log, cpu_job_class
from hpcgpu.cluster.batch.job import GPUJob, worker_suffixes
from hpcgpu.jobspec.cpushape import CPUJobShape

__all__ = ["CPU_JOBS", "GPU_JOBS", "JobKind", "kind_of"]

logger = logging.getLogger("hpcgpu.cluster")


class JobKind(Protocol):
    """What differs between the jobs of a GPU pool and those of a CPU pool."""

    #: Whether several new jobs may go out as one job array (hpcgpu's script) or not
    #: (dask-jobqueue's CPU jobs submit one by one).
    arrays: bool

    def job_class(self, scheduler: str) -> type:
        """The class of the jobs (SpecCluster's ``cls``) on ``scheduler``."""

    def gpus(self, shape: Any) -> int:
        """GPUs in one job of ``shape``."""

    def name_levels(self, shape: Any) -> int:
        """``-<i>`` parts a worker's name adds to its job's name."""

    def worker_groups(self, shape: Any) -> list[str] | None:
        """The name suffixes of one job's workers (SpecCluster's ``group``; None: one)."""

    def resources(self) -> dict[str, float]:
        """What each worker advertises before the pool's own ``--resources``."""

    def threads(self, shape: Any) -> int:
        """Threads of one worker of a job of ``shape``."""

    def error_log(self, dialect: Any, setup: Any, name: str, job_id: str) -> str:
        """The file a job's directives send its standard error to."""

    def check_gpus(self, pool: Any, gpus: Any) -> None:
        """Raise a ValueError where ``scale(gpus=)`` does not apply to ``pool``."""

    def jobs_for_workers(self, pool: Any, workers: int) -> int:
        """Whole jobs of ``pool`` for ``workers`` workers, rounded up."""


@dataclass(frozen=True)
class GPUJobs:
    """hpcgpu's GPU jobs: one worker per GPU, advertising ``GPU=1``.

    >>> from hpcgpu.jobspec.resources import GPUJobShape
    >>> GPU_JOBS.resources(), GPU_JOBS.threads(GPUJobShape.create(cpus_per_gpu=8))
    ({'GPU': 1.0}, 8)
    >>> shape = GPUJobShape.create(nodes=2, gpus_per_node=2)
    >>> GPU_JOBS.gpus(shape), GPU_JOBS.name_levels(shape), GPU_JOBS.worker_groups(shape)
    (4, 2, ['-0-0', '-0-1', '-1-0', '-1-1'])
    """

    arrays = True

    def job_class(self, scheduler: str) -> type:
        return GPUJob

    def gpus(self, shape: Any) -> int:
        return shape.total_gpus

    def name_levels(self, shape: Any) -> int:
        return 2  # -<node>-<gpu>

    def worker_groups(self, shape: Any) -> list[str] | None:
        return worker_suffixes(shape)

    def resources(self) -> dict[str, float]:
        return {"GPU": 1.0}

    def threads(self, shape: Any) -> int:
        return shape.cpus_per_gpu

    def error_log(self, dialect: Any, setup: Any, name: str, job_id: str) -> str:
        return dialect.error_log(setup.shape.job_name, job_id, setup.log_directory)

    def check_gpus(self, pool: Any, gpus: Any) -> None:
        return None

    def jobs_for_workers(self, pool: Any, workers: int) -> int:
        per_job = pool.workers_per_job
        jobs = math.ceil(workers / per_job)
        if jobs * per_job != workers:
            message = (f"scale(gpus={workers}) rounds up to {jobs} job(s) = "
                       f"{jobs * per_job} GPUs ({per_job} per job)")
            logger.warning(message)
            warnings.warn(message, stacklevel=4)
        return jobs


@dataclass(frozen=True)
class CPUJobs:
    """dask-jobqueue's CPU jobs: ``processes`` workers of ``cores / processes`` threads each.

    >>> shape = CPUJobShape(cores=8, processes=4, memory=28 * 10**9)
    >>> CPU_JOBS.resources(), CPU_JOBS.threads(shape), CPU_JOBS.gpus(shape)
    ({}, 2, 0)
    >>> CPU_JOBS.job_class("slurm").__name__, CPU_JOBS.name_levels(shape)
    ('SLURMJob', 1)
    """

    arrays = False

    def job_class(self, scheduler: str) -> type:
        return cpu_job_class(scheduler)

    def gpus(self, shape: Any) -> int:
        return 0

    def name_levels(self, shape: Any) -> int:
        return shape.name_levels  # dask-jobqueue's own

    def worker_groups(self, shape: Any) -> list[str] | None:
        return shape.worker_suffixes()

    def resources(self) -> dict[str, float]:
        return {}

    def threads(self, shape: Any) -> int:
        return shape.worker_process_threads

    def error_log(self, dialect: Any, setup: Any, name: str, job_id: str) -> str:
        return cpu_error_log(dialect.name, setup.log_directory, setup.shape.job_name, name,
                             job_id)

    def check_gpus(self, pool: Any, gpus: Any) -> None:
        raise ValueError(f"scale(gpus={gpus}, pool={pool.name!r}): that pool has CPU "
                         "workers only: use jobs= or n= (workers)")

    def jobs_for_workers(self, pool: Any, workers: int) -> int:
        return math.ceil(workers / pool.workers_per_job)


GPU_JOBS, CPU_JOBS = GPUJobs(), CPUJobs()


def kind_of(shape: Any) -> JobKind:
    """The kind of the jobs of ``shape``: a :class:`CPUJobShape` makes CPU jobs, any other
    shape GPU jobs.

    >>> kind_of(CPUJobShape(cores=8, processes=4, memory=28 * 10**9)) is CPU_JOBS
    True
    >>> GPU_JOBS.arrays, CPU_JOBS.arrays
    (True, False)
    """
    return CPU_JOBS if isinstance(shape, CPUJobShape) else GPU_JOBS
