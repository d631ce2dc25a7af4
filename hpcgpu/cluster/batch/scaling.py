"""Scaling policy: how many whole jobs a ``scale`` or ``adapt`` request means.

No I/O and no cluster: a pool (its job shape) and the numbers asked for, in workers (GPUs),
jobs, cores or memory, give whole jobs. :class:`~hpcgpu.cluster.GPUCluster` applies the
answer to its fleet; :mod:`hpcgpu.cluster.batch.adaptive` and
:mod:`hpcgpu.cluster.batch.pool_adaptive` decide when.
"""

from __future__ import annotations

import math
from typing import Any

from dask.utils import parse_bytes

from hpcgpu.cluster.batch.adaptive import GPUAdaptive
from hpcgpu.cluster.batch.job_kinds import kind_of
from hpcgpu.cluster.batch.pool_adaptive import PoolAdaptive
from hpcgpu.cluster.batch.pools import DEFAULT_POOL
from hpcgpu.jobspec.keywords import MAX_WORKERS, whole_number

__all__ = ["ADAPT_BOUNDS", "adapt_bounds", "adaptive", "job_bounds", "jobs_for", "jobs_to_scale"]

#: adapt's bounds, for the default pool and for each named pool.
ADAPT_BOUNDS = ("minimum_gpus", "maximum_gpus", "minimum_jobs", "maximum_jobs", "minimum",
                "maximum", "minimum_cores", "maximum_cores", "minimum_memory", "maximum_memory")


def jobs_to_scale(pool: Any, n: int | None = None, jobs: int = 0, memory: Any = None,
                  cores: Any = None, gpus: int | None = None) -> int:
    """Jobs of ``pool`` for ``scale(n, jobs, memory, cores, gpus=)``: whole jobs, rounded
    up, the largest of the counts asked for (warned when GPUs round up).

    >>> from types import SimpleNamespace
    >>> from hpcgpu.jobspec.resources import GPUJobShape
    >>> shape = GPUJobShape.create(gpus_per_node=4, memory_per_gpu="10GB")
    >>> pool = SimpleNamespace(name="default", cpu=False, shape=shape, workers_per_job=4)
    >>> jobs_to_scale(pool, jobs=1, memory="50GB"), jobs_to_scale(pool, gpus=8)
    (2, 2)
    >>> jobs_to_scale(pool, gpus=-1)
    Traceback (most recent call last):
    ...
    ValueError: gpus=-1 must be a whole number >= 0
    """
    workers = n if gpus is None else gpus
    kind = kind_of(pool.shape)
    if gpus is not None:
        kind.check_gpus(pool, gpus)
    if workers is not None:
        if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
            what = "n" if gpus is None else "gpus"
            raise ValueError(f"{what}={workers!r} must be a whole number >= 0")
        whole_number("n" if gpus is None else "gpus", workers, 0, MAX_WORKERS)
        jobs = kind.jobs_for_workers(pool, workers)  # GPU jobs warn when they round up
    # bounded: each job is a spec entry made now (scale(jobs=10**30) would never return)
    return whole_number("jobs", max(jobs, jobs_for(pool.shape, cores=cores, memory=memory)),
                        0, MAX_WORKERS)


def adaptive(pools: dict[str, Any], bounds: dict, given: dict | None) -> tuple[type, dict]:
    """``(Adaptive class, its options)`` for ``adapt(**bounds, pools=given)``: whole jobs
    of the default pool, or each adapted pool between its own bounds.

    >>> from types import SimpleNamespace
    >>> from hpcgpu.jobspec.resources import GPUJobShape
    >>> shape = GPUJobShape.create(gpus_per_node=4)
    >>> pools = {"default": SimpleNamespace(shape=shape, workers_per_job=4)}
    >>> cls, options = adaptive(pools, dict(minimum_gpus=1, maximum_gpus=10), None)
    >>> cls.__name__, options
    ('GPUAdaptive', {'gpus_per_job': 4, 'minimum': 4, 'maximum': 8})
    """
    if len(pools) > 1:
        return PoolAdaptive, {"bounds": adapt_bounds(pools, bounds, given or {})}
    if given:
        raise ValueError("adapt(pools=...) needs a cluster made with pools=")
    g = pools[DEFAULT_POOL].workers_per_job
    low_jobs, high_jobs = job_bounds(pools[DEFAULT_POOL], **bounds)
    maximum_workers = high_jobs * g if high_jobs != math.inf else math.inf
    return GPUAdaptive, {"gpus_per_job": g, "minimum": low_jobs * g, "maximum": maximum_workers}


def adapt_bounds(pools: dict[str, Any], bounds: dict, given: dict[str, dict]) -> dict:
    """Pool -> ``(minimum jobs, maximum jobs)``: the default pool's from adapt's own
    ``bounds``, each named pool's from ``given`` (the same names)."""
    per_pool = {DEFAULT_POOL: job_bounds(pools[DEFAULT_POOL], **bounds)}
    for name, own in given.items():
        if name not in pools:
            raise ValueError(f"pool={name!r} is not a pool of this cluster: use one of "
                             f"{', '.join(map(repr, pools))} (pools= of the cluster)")
        unknown = set(own) - set(ADAPT_BOUNDS) if isinstance(own, dict) else {"?"}
        if unknown or name == DEFAULT_POOL:
            raise ValueError(f"adapt(pools={{{name!r}: {own!r}}}): give a dict of "
                             f"{', '.join(ADAPT_BOUNDS)} for a named pool (the default "
                             "pool's bounds are adapt's own arguments)")
        per_pool[name] = job_bounds(pools[name], **own)
    return per_pool


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
