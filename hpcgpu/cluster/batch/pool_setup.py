"""Pools validated before the cluster starts: each pool's setup, walltime plan and job
options (:mod:`hpcgpu.cluster.batch.pools` holds the values, :mod:`hpcgpu.cluster.batch.fleet` the
running pools)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask.config

from hpcgpu.system import config
from hpcgpu.cluster.batch.cpu_setup import prepare_any
from hpcgpu.cluster.batch.job_kinds import kind_of
from hpcgpu.cluster.batch.pools import (DEFAULT_POOL, Pool, pool_resources, prepare_pool,
                                        with_resources, worker_groups)
from hpcgpu.cluster.batch.setup import ClusterSetup, naming_the_source
from hpcgpu.jobspec.queues import check_queue
from hpcgpu.schedulers.registry import get_scheduler
from hpcgpu.jobspec.walltime import Retirement, preemption_directives, retirement_off

__all__ = ["PreparedPool", "job_options_for", "named_pool", "prepare_cluster", "prepare_pools",
           "retirement_options"]


@dataclass(frozen=True)
class PreparedPool:
    """A named pool, validated before the cluster starts: its setup, walltime plan and the
    job options its jobs get."""

    name: str
    setup: ClusterSetup
    retirement: Retirement | None
    job_options: dict


def prepare_cluster(kind: str, options: dict, pools: Any, retire: tuple) -> tuple:
    """``(setup, named pools, walltime plan, job options)`` of a cluster: its default pool
    (its own arguments) and its named pools, validated before anything starts."""
    setup = prepare_any(kind, options)
    named = prepare_pools(kind, pools, options, retire)
    if named:  # every worker advertises its pool
        setup = with_resources(setup, pool_resources(DEFAULT_POOL, setup))
    # the queue check asks the scheduler: a queue it refuses may come from the user's config
    with naming_the_source(kind, options):
        retirement, job_options = job_options_for(kind, setup, retire)
    return setup, named, retirement, job_options


def job_options_for(kind: str, setup: ClusterSetup, retire: tuple) -> tuple[Retirement | None, dict]:
    """The walltime plan and the job options of one pool (the default one included).

    ``retire``: ``(retire_before, lifetime_stagger, replace_ahead, signal_before_walltime,
    requeue)``; CPU workers retire through dask-jobqueue's ``--lifetime`` instead.
    """
    retire_before, stagger, ahead, signal, requeue = retire
    if setup.cpu and retire_before is None:
        retire_before = "off"  # dask-jobqueue's workers: --lifetime in worker_extra_args
    plan, retire_job, extra = retirement_options(
        kind, setup.shape.walltime or 0, retire_before, stagger, ahead, signal, requeue)
    if not setup.cpu:
        check_queue(kind, setup.shape, setup.dialect)  # the queue's nodes, where they can be asked
    else:  # dask-jobqueue's CPU job: the partition and its nodes, where the scheduler can say
        get_scheduler(kind).check_cpu_queue(setup.job_options.get("queue"), setup.shape.cores,
                                            setup.shape.memory)
    job_options = dict(setup.job_options, **({} if setup.cpu else retire_job))
    if extra:
        job_options["job_extra_directives"] = [*_extra_directives(setup, job_options), *extra]
    return plan, job_options


def _extra_directives(setup: ClusterSetup, job_options: dict) -> list[str]:
    """The job's extra directives, from the arguments or (CPU jobs) jobqueue's config."""
    given = job_options.get("job_extra_directives")
    if given is None and setup.cpu:
        given = dask.config.get(f"jobqueue.{setup.config_name}.job-extra-directives", [])
    return list(given or [])


def prepare_pools(kind: str, pools: Any, options: dict, retire: tuple) -> list[PreparedPool]:
    """Validate every named pool (errors name the pool and the field), in order."""
    if pools is None:
        return []
    if not isinstance(pools, dict):
        raise ValueError(f"pools={pools!r} must be a dict of pool name -> job options, e.g. "
                         "pools={'cpu': dict(gpus_per_node=0, cores_per_node=8, "
                         "memory_per_node='32GB')}")
    if "scheduler_in_job" in options and options["scheduler_in_job"]:
        raise ValueError("pools= and scheduler_in_job=True do not go together yet: run the "
                         "scheduler in this process (the default)")
    prepared = []
    for name, pool in pools.items():
        setup = prepare_pool(kind, name, pool, options)
        # a CPU pool retires through dask-jobqueue's --lifetime; the next pools keep ``retire``
        own = (None, *retire[1:3], None, retire[4]) if setup.cpu else retire
        try:
            plan, job_options = job_options_for(kind, setup, own)
        except ValueError as error:
            raise ValueError(f"pools[{name!r}]: {error}") from None
        prepared.append(PreparedPool(name, setup, plan, job_options))
    return prepared


def named_pool(prepared: PreparedPool, kind: str, shared: dict) -> Pool:
    """A named pool, its spec entry built: the default pool's connection options
    ``shared`` (its job options), its own job."""
    p = prepared
    shared = {k: v for k, v in shared.items()
              if k in ("security", "interface", "protocol", "environment")}
    options = {**shared, "config_name": p.setup.config_name or kind, **p.job_options}
    if p.setup.cpu:  # dask-jobqueue's rule: its protocol, or tls:// with TLS
        options["protocol"] = p.setup.network_options.get("protocol")
        options["interface"] = (p.setup.network_options.get("interface")
                                or shared.get("interface"))
    spec: dict = {"cls": kind_of(p.setup.shape).job_class(kind), "options": options}
    groups = worker_groups(p.setup)
    if groups:
        spec["group"] = groups
    return Pool(p.name, p.setup, p.retirement, spec)


def retirement_options(dialect: str, walltime: int, retire_before: Any = None,
                       lifetime_stagger: Any = None, replace_ahead: Any = None,
                       signal_before_walltime: Any = None,
                       requeue: bool = False) -> tuple[Retirement | None, dict, list[str]]:
    """Validate the retirement options: the plan (None when off), the job options that carry
    them to the workers, and the extra directives for the warning signal / requeue.

    Examples
    --------
    >>> plan, job, extra = retirement_options("slurm", 120, signal_before_walltime=30)
    >>> plan.retire_before, job, extra
    (60.0, {'retire_before': None, 'lifetime_stagger': None}, ['--signal=USR1@30'])
    >>> retirement_options("slurm", 3600, retire_before="off")[0] is None
    True
    >>> retirement_options("slurm", 120, signal_before_walltime="soon")
    Traceback (most recent call last):
    ...
    ValueError: signal_before_walltime='soon' is not a duration: give seconds (90) or text \
('5 minutes', '90s'), or 'auto'
    """
    from hpcgpu.jobspec.walltime import _seconds

    before = config.get("retire-before") if retire_before is None else retire_before
    stagger = config.get("lifetime-stagger") if lifetime_stagger is None else lifetime_stagger
    ahead = config.get("replace-ahead") if replace_ahead is None else replace_ahead
    off = retirement_off(before)
    plan = None if off else Retirement.create(walltime, before, stagger, ahead)
    job = {"retire_before": "off" if off else (None if before is None else str(before)),
           "lifetime_stagger": None if stagger is None else str(stagger)}
    signal_before = signal_before_walltime
    if signal_before is True:
        signal_before = 120
    seconds = _seconds(signal_before, "signal_before_walltime") if signal_before else None
    return plan, job, preemption_directives(dialect, seconds, bool(requeue))
