"""The cluster's fleet of batch jobs: its pools, the spec entry of each job, records, targets.

distributed's ``SpecCluster`` keeps the desired state as data, ``worker_spec`` (one entry
per job here), and reconciles the world to it. :class:`JobFleet` owns that desired state:
which pools there are, which pool each job belongs to, how many jobs each pool should have
(``targets``), and a :class:`~hpcgpu.cluster.batch.job_table.JobRecord` per job ever submitted.
It is the one writer of the records, of the spec and of the started jobs (the cluster
overrides SpecCluster's ``scale``, ``scale_down`` and reconciliation, which wrote them): what
happens to a job comes to it as an event (:mod:`hpcgpu.cluster.batch.job_events`), which
:meth:`JobFleet.apply` applies, moving the job's state as :mod:`hpcgpu.cluster.batch.job_state`
allows. It never runs a command: the submitter submits and cancels, the monitor polls, and
both, with the walltime planner, only read the fleet and hand it events.
"""

from __future__ import annotations

import functools
from types import MappingProxyType
from typing import Any, Callable, Mapping

from hpcgpu.cluster.batch.adaptive import job_of_worker
from hpcgpu.cluster.batch.exclusions import HostExclusions
from hpcgpu.cluster.batch.job_events import (Cancelling, Connected, Ended, Requeued, RetireNow,
                                             Retiring, SubmitFailed, Submitted, advance)
from hpcgpu.cluster.batch.job_kinds import kind_of
from hpcgpu.cluster.batch.job_table import JobRecord, JobTable
from hpcgpu.cluster.batch.pools import DEFAULT_POOL, Pool, PoolJobKey
from hpcgpu.jobspec.worker_command import split_resources

__all__ = ["JobFleet"]

_PLACEHOLDER = "tcp://<insert-scheduler-address-here>:8786"


class JobFleet:
    """Pools and their jobs.

    Parameters
    ----------
    name_of : callable
        Job number (``"3"``, ``"cpu-3"``) -> job name (the cluster's ``_new_worker_name``).
    spec, jobs : dict
        The desired jobs (name -> spec entry) and the started ones (name -> job): the
        dicts SpecCluster reconciles (``worker_spec`` and ``workers``).
    arrays : JobArrays
        Makes the jobs of new spec entries, several at once as one array.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> fleet = JobFleet(lambda n: f"c-{n}")
    >>> fleet.add_pool(Pool("default", SimpleNamespace(cpu=False, shape=None), spec={"cls": 1}))
    >>> fleet.grow(2)
    >>> list(fleet.spec), fleet.jobs_of("default")
    (['c-0', 'c-1'], ['c-0', 'c-1'])
    >>> fleet.pool("gpu")
    Traceback (most recent call last):
    ...
    ValueError: pool='gpu' is not a pool of this cluster: use one of 'default' (pools= of the cluster)
    """

    def __init__(self, name_of: Callable[[str], str], spec: dict | None = None,
                 jobs: dict | None = None, arrays: Any = None) -> None:
        self.arrays = arrays  # makes the jobs of new entries (hpcgpu.cluster.batch.arrays)
        self.spec: dict[str, dict] = {} if spec is None else spec
        self.jobs: dict[str, Any] = {} if jobs is None else jobs
        self.pools: dict[str, Pool] = {}
        self.pool_of: dict[str, str] = {}  # job name -> its pool (absent: the default)
        self.targets: dict[str, int] = {}
        self._records: dict[str, JobRecord] = {}
        #: Job name -> its record, read-only: :meth:`apply` and :meth:`new_record` write them.
        self.records: Mapping[str, JobRecord] = MappingProxyType(self._records)
        #: Every job ever submitted, for the cancel at exit, collection or SIGTERM.
        self.submitted: dict[str, Any] = {}
        #: A worker's job name (:meth:`key_jobs` sets it for the pools).
        self.job_key: Callable[[Any], str] = job_of_worker
        self._name_of = name_of
        self._next: dict[str, int] = {}  # per pool: each pool's jobs count from 0
        #: Hosts new jobs stay off (a worker failed the network check there).
        self.exclusions = HostExclusions()

    # ------------------------------------------------------------------ pools
    def add_pool(self, pool: Pool) -> None:
        self.pools[pool.name] = pool

    def pool(self, name: str | None) -> Pool:
        """Pool ``name`` (None: the default one); a ValueError names the known ones."""
        if name is None:
            return self.pools[DEFAULT_POOL]
        if name not in self.pools:
            raise ValueError(f"pool={name!r} is not a pool of this cluster: use one of "
                             f"{', '.join(map(repr, self.pools))} (pools= of the cluster)")
        return self.pools[name]

    def job_pool(self, job: str) -> Pool:
        """The pool of job ``job`` (a name in the spec)."""
        return self.pools[self.pool_of.get(job, DEFAULT_POOL)]

    def jobs_of(self, pool: str) -> list[str]:
        """The jobs of ``pool`` in the spec, oldest first."""
        return [job for job in self.spec if self.pool_of.get(job, DEFAULT_POOL) == pool]

    def key_jobs(self, cluster_name: str) -> Callable[[Any], str]:
        """Set (and return) :attr:`job_key` for the pools there are now: a worker's job
        name (picklable: the scheduler runs it for adaptive scaling)."""
        default = self.pools[DEFAULT_POOL].name_levels
        self.job_key = functools.partial(job_of_worker, levels=default)
        if len(self.pools) > 1:
            self.job_key = PoolJobKey(
                tuple((f"{cluster_name}-{name}-", pool.name_levels)
                      for name, pool in self.pools.items() if name != DEFAULT_POOL), default)
        return self.job_key

    def worker_pool(self, worker: str) -> str:
        """The pool of a worker (by its name)."""
        return self.pool_of.get(self.job_key(worker), DEFAULT_POOL)

    def resources(self, name: str) -> dict[str, float]:
        """What each worker of pool ``name`` advertises (``GPU=1``, ``CPU=<threads>``...)."""
        pool = self.pools[name]
        given, _ = split_resources(pool.spec["options"].get("worker_extra_args") or ())
        return {**kind_of(pool.shape).resources(), **given}

    def threads(self, name: str) -> int:
        """Threads of one worker of pool ``name``."""
        return kind_of(self.pools[name].shape).threads(self.pools[name].shape)

    def job_script(self, pool: str | None = None, address: str | None = None) -> str:
        """The script one job of ``pool`` submits to scheduler ``address`` (default: a
        placeholder)."""
        spec = self.pool(pool).spec
        return spec["cls"](address or _PLACEHOLDER, name="dummy-name",
                           **spec["options"]).job_script()

    # ------------------------------------------------------------------ desired jobs
    def new_entry(self, pool: str = DEFAULT_POOL) -> dict:
        """The next job's spec entry, under a name never used before (a replaced job's
        workers must not take the names of the dead ones): ``<cluster>-<n>``, or
        ``<cluster>-<pool>-<n>`` for a named pool, each pool counting from 0.

        >>> from types import SimpleNamespace as Pool
        >>> fleet = JobFleet(lambda n: f"c-{n}")
        >>> fleet.pools = {"default": Pool(spec={}), "cpu": Pool(spec={})}
        >>> fleet.grow(2); fleet.grow(1, "cpu")
        >>> list(fleet.spec)
        ['c-0', 'c-1', 'c-cpu-0']
        """
        prefix = "" if pool == DEFAULT_POOL else f"{pool}-"
        number = self._next.get(pool, 0)
        while (name := self._name_of(f"{prefix}{number}")) in self.spec or name in self.records:
            number += 1
        self._next[pool] = number
        self.pool_of.setdefault(name, pool)
        return {name: self.pools[pool].spec}

    def grow(self, count: int, pool: str = DEFAULT_POOL) -> None:
        """Add ``count`` new jobs of ``pool`` to the spec."""
        for _ in range(count):
            self.spec.update(self.new_entry(pool))

    def scale_to(self, jobs: int, pool: str, connected: Callable[[], dict[str, set[str]]],
                 may_grow: Callable[[], bool]) -> None:
        """Set ``pool``'s target to ``jobs`` and add or drop spec entries until it has
        them (``connected()``: job -> workers connected now; ``may_grow()``: whether to
        add any)."""
        self.targets[pool] = jobs
        have = len(self.jobs_of(pool))
        if have > jobs:
            self.shrink(jobs, pool, connected())
        elif have < jobs and may_grow():
            self.grow(jobs - have, pool)

    def shrink(self, jobs: int, pool: str, connected: dict[str, set[str]]) -> None:
        """Drop jobs of ``pool`` until it has ``jobs``: jobs whose workers have not
        connected first, newest first."""
        have = self.jobs_of(pool)
        order = sorted(reversed(have), key=lambda job: bool(connected.get(job)))
        for job in order[: len(have) - jobs]:
            del self.spec[job]

    def retire(self, jobs: list[str]) -> None:
        """Take ``jobs`` out of the spec now (retiring ones too); the targets follow."""
        for job in jobs:
            self.spec.pop(job, None)
            if job in self.records and self.records[job].retiring:
                self.apply(RetireNow(job))  # asked for: retired now, not left to end
        self.targets = {pool: len(self.jobs_of(pool)) for pool in self.pools}

    def waiting(self) -> bool:
        """Whether entries of the spec have no job yet (held back by a cap, or new)."""
        return any(name not in self.jobs for name in self.spec)

    def missing(self) -> dict[str, int]:
        """Pool -> jobs its target asks for beyond those in the spec (may be negative)."""
        return {pool: self.targets.get(pool, 0) - len(self.jobs_of(pool)) for pool in self.pools}

    def clear(self) -> None:
        """Every pool's target to 0, its jobs out of the spec (the cluster closes)."""
        for pool in self.pools:
            self.targets[pool] = 0
            for job in self.jobs_of(pool):
                del self.spec[job]

    # ------------------------------------------------------------------ records
    def table(self) -> JobTable:
        """Every job submitted, as last polled, oldest first."""
        return JobTable(record.info() for record in self.records.values())

    def live(self) -> dict[str, str]:
        """Job id -> name of the jobs submitted that are not over."""
        return {r.job_id: name for name, r in self.records.items() if r.job_id and not r.ended}

    def retiring(self) -> set[str]:
        """Jobs left to retire by themselves (not to be cancelled while the cluster runs)."""
        return {name for name, r in self.records.items() if r.retiring}

    def apply(self, event: Any) -> Any:
        """The one way a job's record, the spec and the started jobs change: ``event`` (one of
        :mod:`hpcgpu.cluster.batch.job_events`) applied. Returns the job that left the started ones
        (an ended or requeued job: the caller closes or cancels it), else None."""
        name = event.name
        self._records[name] = advance(self._records[name], event)
        if isinstance(event, Submitted):
            self.submitted[name] = self.jobs[name] = event.job
        elif isinstance(event, Retiring) and self.spec.pop(name, None) is not None:
            self.grow(1, self.job_pool(name).name)  # its replacement, in its own pool
        elif isinstance(event, (SubmitFailed, Ended)) or (
                isinstance(event, Requeued) and not event.keep):
            self.spec.pop(name, None)  # dask/distributed#9102: a dead job leaves the spec
            job = self.jobs.pop(name, None)
            if job is not None and isinstance(event, Ended):
                job.ended = True  # nothing left to cancel
            return job
        return None

    def refresh(self, connected: dict[str, set[str]]) -> None:
        """Each job's connected workers (job name -> worker names)."""
        for name, record in list(self.records.items()):
            workers = frozenset(connected.get(name, ()))
            if workers != record.connected or record.state in ("submitting", "pending"):
                self.apply(Connected(name, workers))  # others: nothing would change

    async def make_jobs(self, address: str, names: list[str],
                        rooms: dict[str, int | None] | None = None) -> dict[str, Any]:
        """The jobs of the new entries ``names``, each with its record; not submitted
        (``rooms``: pool -> running room, :meth:`JobArrays.make_jobs`)."""
        jobs = await self.arrays.make_jobs(address, names, self, rooms)
        for name in jobs:
            self.new_record(name)
        return jobs

    def new_record(self, name: str) -> None:
        """The record of the new job ``name`` of the spec: submitted, its submission under way."""
        pool = self.job_pool(name)
        self._records[name] = JobRecord(name, pool.workers_per_job,
                                        pool=pool.name if len(self.pools) > 1 else None,
                                        excluded=self.exclusions.hosts())

    def cancelling(self, jobs: set[str]) -> None:
        """``jobs`` are cancelled by the cluster (their end is no failure)."""
        for job in jobs & self.records.keys():
            self.apply(Cancelling(job))

    def cancelled(self, jobs: set[str]) -> None:
        """``jobs`` were cancelled: no longer started jobs."""
        for job in jobs:
            self.jobs.pop(job, None)
