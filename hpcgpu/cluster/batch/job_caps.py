"""Caps on a cluster's queued and running jobs: the values, and how many jobs may go out now.

``max_queued_jobs`` caps the jobs submitted that have not started (pending, held, requeued);
``max_running_jobs`` the jobs that may run at once. Both hold for the whole cluster and, given
in ``pools=``, for one pool. A site profile's caps are ceilings: a user value above one is
refused. No I/O here: :mod:`hpcgpu.cluster.batch.admission` counts the jobs and applies the answer.

A job submitted may start at any time, so a running cap counts every job submitted and not
over, except the elements of an array beyond its throttle (``%T``, ``-tc T``): the scheduler
runs at most T of them at once. New jobs that go out as one array get a throttle that fits
the running room, and so may wait in the queue rather than in this process.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from hpcgpu.jobspec.forms import whole_number

__all__ = ["CAP_FIELDS", "Admission", "JobCaps", "Usage", "admit", "plan", "site_ceiling"]

#: keyword -> config key (``hpcgpu.<key>``, ``hpcgpu.<scheduler>.<key>``, a profile's key)
CAP_FIELDS = {"max_queued_jobs": "max-queued-jobs", "max_running_jobs": "max-running-jobs"}
_MOST = 10_000_000


@dataclass(frozen=True)
class JobCaps:
    """At most ``max_queued_jobs`` jobs waiting and ``max_running_jobs`` that may run
    (None: no cap).

    >>> JobCaps.create({"max_queued_jobs": 4}, "")
    JobCaps(max_queued_jobs=4, max_running_jobs=None)
    >>> JobCaps.create({"max_running_jobs": 0}, "pools['cpu']: ")
    Traceback (most recent call last):
    ...
    ValueError: pools['cpu']: max_running_jobs=0 must be a whole number from 1 to 10000000
    """

    max_queued_jobs: int | None = None
    max_running_jobs: int | None = None

    @classmethod
    def create(cls, values: Mapping[str, Any], where: str = "") -> "JobCaps":
        """Caps from ``values`` (keyword -> value, None: not given); a ValueError names the
        field (after ``where``) and the accepted form."""
        checked = {}
        for field in CAP_FIELDS:
            value = values.get(field)
            try:
                checked[field] = None if value is None else whole_number(field, value, 1, _MOST)
            except ValueError as error:
                raise type(error)(f"{where}{error}") from None
        return cls(**checked)

    @property
    def any(self) -> bool:
        return self.max_queued_jobs is not None or self.max_running_jobs is not None

    def under(self, site: "JobCaps", site_name: str, where: str = "") -> "JobCaps":
        """These caps within the ``site``'s ceilings (a cap not given takes the site's); a
        value above the site's is refused, naming the field, the site's value and the fix.

        >>> site = JobCaps(10, None)
        >>> JobCaps(None, 4).under(site, "profile 'x'")
        JobCaps(max_queued_jobs=10, max_running_jobs=4)
        >>> JobCaps(20, None).under(site, "profile 'x'")
        Traceback (most recent call last):
        ...
        ValueError: max_queued_jobs=20 is above the site's ceiling max_queued_jobs=10 (profile 'x'): give max_queued_jobs<=10, or leave it out to use the site's 10
        """
        out = {}
        for field in CAP_FIELDS:
            mine, ceiling = getattr(self, field), getattr(site, field)
            if mine is not None and ceiling is not None and mine > ceiling:
                raise ValueError(
                    f"{where}{field}={mine} is above the site's ceiling {field}={ceiling} "
                    f"({site_name}): give {field}<={ceiling}, or leave it out to use the "
                    f"site's {ceiling}")
            out[field] = mine if mine is not None else ceiling
        return JobCaps(**out)


def site_ceiling(profile: str | None, values: Mapping[str, Any]) -> tuple[JobCaps, str]:
    """``(ceilings, their words)`` from a site profile's ``values`` (underscored keys).

    >>> site_ceiling("hpc", {"max_running_jobs": 8})
    (JobCaps(max_queued_jobs=None, max_running_jobs=8), "profile 'hpc' (hpcgpu.profiles.hpc)")
    """
    words = f"profile {profile!r} (hpcgpu.profiles.{profile})"
    return JobCaps.create(values, f"{words}: "), words


@dataclass(frozen=True)
class Usage:
    """Jobs submitted and not over: ``queued`` not started yet, ``running`` the most of
    them that may run at once (array elements beyond their array's throttle left out)."""

    queued: int = 0
    running: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.queued + other.queued, self.running + other.running)


@dataclass(frozen=True)
class Admission:
    """``jobs`` new jobs may go out now; ``room``: the most of them that may run at once
    (None: no running cap). As one array, they get the throttle ``room`` where it is
    smaller than ``jobs``; ``held``: the cap that holds the rest back (None: none)."""

    jobs: int
    room: int | None = None
    held: str | None = None

    @property
    def running(self) -> int:
        """The most of these jobs that may run at once."""
        return self.jobs if self.room is None else min(self.jobs, self.room)


def _rooms(limits: Iterable[tuple[JobCaps, Usage]]) -> tuple[float, float, str | None, str | None]:
    queue = run = math.inf
    queue_by = run_by = None
    for caps, usage in limits:
        if caps.max_queued_jobs is not None and caps.max_queued_jobs - usage.queued < queue:
            queue, queue_by = max(caps.max_queued_jobs - usage.queued, 0), "max_queued_jobs"
        if caps.max_running_jobs is not None and caps.max_running_jobs - usage.running < run:
            run, run_by = max(caps.max_running_jobs - usage.running, 0), "max_running_jobs"
    return queue, run, queue_by, run_by


def admit(wanted: int, limits: Iterable[tuple[JobCaps, Usage]], throttled: bool) -> Admission:
    """How many of ``wanted`` new jobs may be submitted now, under every ``(caps, usage)``
    of ``limits`` (a pool's and the cluster's). ``throttled``: several new jobs go out as
    one array whose throttle the scheduler keeps, so only the throttle counts as running.

    >>> admit(10, [(JobCaps(4, None), Usage(1, 3))], throttled=False)
    Admission(jobs=3, room=None, held='max_queued_jobs')
    >>> admit(10, [(JobCaps(None, 4), Usage(0, 1))], throttled=False)
    Admission(jobs=3, room=3, held='max_running_jobs')
    >>> admit(10, [(JobCaps(None, 4), Usage(0, 1))], throttled=True)  # one array, %3
    Admission(jobs=10, room=3, held=None)
    """
    queue, run, queue_by, run_by = _rooms(limits)
    jobs = min(wanted, queue)
    if not (throttled and jobs >= 2 and run >= 1):
        jobs = min(jobs, run)
    held = None
    if jobs < wanted:
        held = queue_by if queue <= jobs else run_by
    return Admission(int(jobs), None if run == math.inf else int(run), held)


def plan(wanted: Mapping[str, int], usage: Mapping[str, Usage], caps: Mapping[str, JobCaps],
         total: JobCaps, throttled: Mapping[str, bool]) -> dict[str, Admission]:
    """Pool -> its :class:`Admission`, in the order of ``wanted``: each pool within its own
    caps and, with the pools before it, within the cluster's ``total``.

    >>> plan({"default": 3, "cpu": 2}, {}, {"cpu": JobCaps(1, None)}, JobCaps(3, None),
    ...      {"default": True, "cpu": False})  # doctest: +NORMALIZE_WHITESPACE
    {'default': Admission(jobs=3, room=None, held=None),
     'cpu': Admission(jobs=0, room=None, held='max_queued_jobs')}
    """
    used = sum(usage.values(), Usage())
    out = {}
    for pool, count in wanted.items():
        own = usage.get(pool, Usage())
        admission = admit(count, [(caps.get(pool, JobCaps()), own), (total, used)],
                          throttled.get(pool, False))
        used += Usage(admission.jobs, admission.running)
        out[pool] = admission
    return out
