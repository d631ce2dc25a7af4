"""Which of the fleet's new jobs go out now, under the caps on queued and running jobs.

The fleet's spec holds every job the targets ask for; :class:`JobGate` lets the submitter
make the oldest of them that the caps (:mod:`hpcgpu.cluster.batch.job_caps`) allow, and says once,
per pool, when a cap holds the rest back. Those stay in the spec, unsubmitted: the monitor
asks for another reconciliation after each poll while any wait, so they go out as queued jobs
start or running ones end. :func:`cluster_caps` resolves the caps before anything starts.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any, Mapping

from hpcgpu.system import config
from hpcgpu.cluster.batch.job_caps import CAP_FIELDS, Admission, JobCaps, Usage, plan, site_ceiling
from hpcgpu.cluster.batch.job_state import JobState
from hpcgpu.cluster.batch.pools import DEFAULT_POOL
from hpcgpu.schedulers.registry import get_scheduler

__all__ = ["ClusterCaps", "JobGate", "cluster_caps", "usage_of"]

logger = logging.getLogger("hpcgpu.cluster")

_WAITING = (JobState.SUBMITTED, JobState.PENDING, JobState.REQUEUED)


@dataclass(frozen=True)
class ClusterCaps:
    """The caps of the whole cluster (``total``) and of each named pool (``pools``)."""

    total: JobCaps = JobCaps()
    pools: Mapping[str, JobCaps] = field(default_factory=dict)


def cluster_caps(scheduler: str, given: Mapping[str, Any], profile: str | None = None,
                 pools: Any = None) -> ClusterCaps:
    """The caps of a cluster: ``given`` (keyword -> value, None: not given), else
    ``hpcgpu.<scheduler>.<key>``, else ``hpcgpu.<key>``, within the site profile's ceilings;
    each pool's from its options in ``pools``. Errors name the field, and the config key a
    value came from.

    >>> import dask
    >>> with dask.config.set({"hpcgpu.profiles.site": {"scheduler": "slurm", "max-queued-jobs": 4}}):
    ...     cluster_caps("slurm", {"max_running_jobs": 2}, "site").total
    JobCaps(max_queued_jobs=4, max_running_jobs=2)
    >>> with dask.config.set({"hpcgpu.slurm.max-running-jobs": -1}):
    ...     cluster_caps("slurm", {})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: max_running_jobs=-1 must be a whole number from 1 to 10000000 (the value comes from hpcgpu.slurm.max-running-jobs of your dask config: ...)
    """
    name, values = config.site_profile(scheduler, profile)
    site, words = site_ceiling(name, values) if name else (JobCaps(), "")
    total = {}
    for keyword, key in CAP_FIELDS.items():
        value, source = given.get(keyword), ""
        for where in (f"{scheduler}.{key}", key):
            if value is None and config.get(where) is not None:
                value, source = config.get(where), where
        try:
            total[keyword] = getattr(JobCaps.create({keyword: value}).under(site, words), keyword)
        except ValueError as error:
            suffix = (f" (the value comes from hpcgpu.{source} of your dask config: "
                      "~/.config/dask/*.yaml or DASK_* variables)") if source else ""
            raise type(error)(f"{error}{suffix}") from None
    own = {}
    for pool, options in (pools or {}).items():
        where = f"pools[{pool!r}]: "
        own[pool] = JobCaps.create(options, where).under(site, words, where)
    return ClusterCaps(JobCaps(**total), own)


def usage_of(fleet: Any) -> dict[str, Usage]:
    """Pool -> its jobs submitted and not over: how many wait, and how many may run at once
    (an array's elements count up to its throttle, ``submission.throttle``)."""
    out: dict[str, Usage] = {}
    arrays: dict[int, list] = {}  # id of the submission -> [pool, throttle, elements]
    for name, job in fleet.jobs.items():
        record = fleet.records.get(name)
        if record is None or record.ended:
            continue
        pool = fleet.job_pool(name).name
        waiting = int(record.phase in _WAITING)
        out[pool] = out.get(pool, Usage()) + Usage(waiting, 0)
        submission = getattr(job, "submission", None)
        if submission is None:
            out[pool] += Usage(0, 1)
        else:
            arrays.setdefault(id(submission), [pool, submission.throttle, 0])[2] += 1
    for pool, throttle, elements in arrays.values():
        out[pool] += Usage(0, elements if throttle is None else min(throttle, elements))
    return out


class JobGate:
    """The new jobs of ``fleet`` that may be submitted now (:meth:`choose`).

    ``caps``: a :class:`ClusterCaps` (none by default); the cluster sets it.
    """

    def __init__(self, fleet: Any, caps: ClusterCaps | None = None) -> None:
        self.fleet = fleet
        self.caps = caps or ClusterCaps()
        self._said: set[str] = set()  # pools whose hold was told (told again after it ends)

    def throttled(self, pool: Any) -> bool:
        """Whether several new jobs of ``pool`` go out as one array the scheduler throttles."""
        arrays = self.fleet.arrays
        if arrays is None or not pool.kind.arrays or not arrays.settings.enabled:
            return False
        scheduler = get_scheduler(arrays.dialect.name)
        return scheduler.has_arrays and scheduler.throttles_arrays

    def choose(self, names: set[str]) -> tuple[list[str], dict[str, int | None]]:
        """``(names to make now, pool -> running room of its new jobs)``: the oldest new
        entries of each pool that the caps allow (all of them without caps)."""
        if not (self.caps.total.any or any(c.any for c in self.caps.pools.values())):
            return sorted(names), {}
        fleet = self.fleet
        by_pool: dict[str, list[str]] = {}
        for name in sorted(names, key=_oldest_first):
            by_pool.setdefault(fleet.job_pool(name).name, []).append(name)
        wanted = {pool: len(by_pool[pool]) for pool in fleet.pools if pool in by_pool}
        throttled = {pool: self.throttled(fleet.pools[pool]) for pool in wanted}
        admitted = plan(wanted, usage_of(fleet), self.caps.pools, self.caps.total, throttled)
        for pool in fleet.pools:
            self._tell(pool, admitted.get(pool), wanted.get(pool, 0))
        chosen = [n for pool, a in admitted.items() for n in by_pool[pool][:a.jobs]]
        return chosen, {pool: a.room for pool, a in admitted.items()}

    def _tell(self, pool: str, admission: Admission | None, wanted: int) -> None:
        """One warning when a cap starts to hold ``pool``'s target back (again after the
        hold ended)."""
        throttle = admission is not None and admission.room is not None and \
            admission.jobs > admission.room  # one array: the scheduler holds the rest
        if admission is None or (admission.held is None and not throttle):
            self._said.discard(pool)
            return
        if pool in self._said:
            return
        self._said.add(pool)
        keyword = admission.held or "max_running_jobs"
        values = [("", getattr(self.caps.total, keyword)),
                  (f"pool {pool!r}'s ", getattr(self.caps.pools.get(pool, JobCaps()), keyword))]
        cap = " and ".join(f"{whose}{keyword}={value}" for whose, value in values
                           if value is not None)
        whose = "" if pool == DEFAULT_POOL else f" of pool {pool!r}"
        if admission.held is None:
            logger.warning("%s: the %d new jobs%s go out as one array, at most %d of them "
                           "running at once; the others wait in the scheduler's queue", cap,
                           admission.jobs, whose, admission.room)
            return
        when = "queued jobs start" if keyword == "max_queued_jobs" else "running jobs end"
        logger.warning("%s holds back new jobs%s: %d submitted now; the other %d of the "
                       "target wait here and are submitted as %s", cap, whose,
                       admission.jobs, wanted - admission.jobs, when)


def _oldest_first(name: str) -> tuple:
    prefix, _, tail = name.rpartition("-")
    return (prefix, int(tail) if tail.isdigit() else -1, name)
