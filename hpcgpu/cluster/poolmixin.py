"""The cluster's side of several pools: preparing them before start, their spec entries,
and which pool a job belongs to (:mod:`hpcgpu.cluster.pools` holds the values)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import dask.config

from hpcgpu.cluster.cpujob import cpu_job_class
from hpcgpu.cluster.expiry import retirement_options
from hpcgpu.cluster.job import GPUJob
from hpcgpu.cluster.pools import DEFAULT_POOL, Pool, PoolJobKey, prepare_pool, worker_groups
from hpcgpu.cluster.setup import ClusterSetup
from hpcgpu.jobspec.partition import check_cpu_partition
from hpcgpu.jobspec.queues import check_queue
from hpcgpu.jobspec.walltime import Retirement
from hpcgpu.jobspec.worker_command import split_resources

__all__ = ["ClusterPools", "PreparedPool", "prepare_pools", "job_options_for"]


@dataclass(frozen=True)
class PreparedPool:
    """A named pool, validated before the cluster starts: its setup, walltime plan and the
    job options its jobs get."""

    name: str
    setup: ClusterSetup
    retirement: Retirement | None
    job_options: dict


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
            if setup.cpu:  # the partition's nodes, where SLURM can say
                check_cpu_partition(kind, setup.job_options.get("queue"), setup.shape.cores,
                                    setup.shape.memory)
        except ValueError as error:
            raise ValueError(f"pools[{name!r}]: {error}") from None
        prepared.append(PreparedPool(name, setup, plan, job_options))
    return prepared


class ClusterPools:
    """Mixin for :class:`~hpcgpu.cluster.GPUCluster`: its pools and their jobs."""

    _pools: dict[str, Pool]
    _pool_of: dict[str, str]

    def _add_pools(self, prepared: list[PreparedPool]) -> None:
        """Each named pool's spec entry: the default's connection options, its own job."""
        shared = {k: v for k, v in self._job_kwargs.items()
                  if k in ("security", "interface", "protocol", "environment")}
        kind = self._dialect.name
        for p in prepared:
            options = {**shared, "config_name": p.setup.config_name or kind, **p.job_options}
            if p.setup.cpu:  # dask-jobqueue's rule: its protocol, or tls:// with TLS
                options["protocol"] = p.setup.network_options.get("protocol")
                options["interface"] = (p.setup.network_options.get("interface")
                                        or shared.get("interface"))
            spec: dict = {"cls": cpu_job_class(kind) if p.setup.cpu else GPUJob,
                          "options": options}
            groups = worker_groups(p.setup)
            if groups:
                spec["group"] = groups
            self._pools[p.name] = Pool(p.name, p.setup, p.retirement, spec)
        if prepared:
            self.job_key = PoolJobKey(
                tuple((f"{self._name}-{name}-", pool.name_levels)
                      for name, pool in self._pools.items() if name != DEFAULT_POOL),
                self._pools[DEFAULT_POOL].name_levels)

    @property
    def pools(self) -> dict[str, Pool]:
        """The pools by name (``default``: the cluster's own arguments), each a frozen
        :class:`~hpcgpu.cluster.pools.Pool`."""
        return dict(self._pools)

    def _pool(self, name: str | None) -> Pool:
        """Pool ``name`` (None: the default one); a ValueError names the known ones."""
        if name is None:
            return self._pools[DEFAULT_POOL]
        if name not in self._pools:
            raise ValueError(f"pool={name!r} is not a pool of this cluster: use one of "
                             f"{', '.join(map(repr, self._pools))} (pools= of the cluster)")
        return self._pools[name]

    def _job_pool(self, job: str) -> Pool:
        """The pool of job ``job`` (a name in ``worker_spec``)."""
        return self._pools[self._pool_of.get(job, DEFAULT_POOL)]

    def _jobs_of(self, pool: str) -> list[str]:
        """The jobs of ``pool`` in the spec, oldest first."""
        return [job for job in self.worker_spec if self._pool_of.get(job, DEFAULT_POOL) == pool]

    def _worker_pool(self, worker: str) -> str:
        """The pool of a worker (by its name)."""
        return self._pool_of.get(self.job_key(worker), DEFAULT_POOL)

    def _pool_resources(self, name: str) -> dict[str, float]:
        """What each worker of pool ``name`` advertises (``GPU=1``, ``CPU=<threads>``...)."""
        pool = self._pools[name]
        given, _ = split_resources(pool.spec["options"].get("worker_extra_args") or ())
        return {**({} if pool.cpu else {"GPU": 1.0}), **given}

    def _pool_threads(self, name: str) -> int:
        """Threads of one worker of pool ``name``."""
        pool = self._pools[name]
        return pool.shape.worker_process_threads if pool.cpu else pool.shape.cpus_per_gpu

    def job_script(self, pool: str | None = None) -> str:
        """The script one job of ``pool`` (default: the default pool) submits, with a
        placeholder worker name."""
        spec = self._pool(pool).spec
        if spec is self.new_spec:
            return self._dummy_job.job_script()
        # The scheduler's address, as dask-jobqueue's _dummy_job shows for the default pool.
        address = getattr(getattr(self, "scheduler", None), "address", None) or _PLACEHOLDER
        return spec["cls"](address, name="dummy-name", **spec["options"]).job_script()


_PLACEHOLDER = "tcp://<insert-scheduler-address-here>:8786"
