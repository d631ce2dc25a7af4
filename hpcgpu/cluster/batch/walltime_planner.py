"""Walltime-aware retirement, the cluster's side: replace a job before its workers retire.

Each running job's workers retire on their own before the walltime
(:mod:`hpcgpu.worker.walltime`). ``replace_ahead`` seconds before the first of them may retire,
the planner tells the fleet the job is *retiring*: the fleet takes it out of its spec (so
``scale``/``adapt`` count its replacement instead) and adds the replacement; the retiring job
is not cancelled but left to end by itself, its workers handing their data to the others first. Closing the cluster
still cancels it. The plan of each pool is its :class:`~hpcgpu.jobspec.walltime.Retirement`.
"""

from __future__ import annotations

import logging

from hpcgpu.cluster.batch.fleet import JobFleet
from hpcgpu.cluster.batch.job_events import Retiring
from hpcgpu.cluster.batch.job_state import JobState

__all__ = ["WalltimePlanner"]

logger = logging.getLogger("hpcgpu.cluster")


#: seconds: jobs whose replacement falls due within this of the first due go out with it, in
#: one submit (one array): the elements of one array start over a few scheduler passes, and
#: each is seen running at its own poll
GATHER_WINDOW = 5.0


class WalltimePlanner:
    """Which jobs near their walltime (:meth:`due`, one :class:`Retiring` event each, which the
    fleet applies: out of the spec, replaced in its pool); each replacement is told in
    ``events`` (the cluster's) and the log.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from hpcgpu.cluster.batch.job_events import Seen, Submitted
    >>> from hpcgpu.cluster.batch.pools import Pool
    >>> from hpcgpu.jobspec.walltime import Retirement
    >>> fleet = JobFleet(lambda n: f"c-{n}")
    >>> plan = Retirement.create(600, 60, 0, 30)
    >>> shape = SimpleNamespace(workers_per_job=4)
    >>> fleet.add_pool(Pool("default", SimpleNamespace(cpu=False, shape=shape), plan, {}))
    >>> fleet.grow(3)
    >>> for n, started in enumerate([0.0, 3.0, 20.0]):  # c-1 within GATHER_WINDOW of c-0
    ...     fleet.new_record(f"c-{n}")
    ...     _ = fleet.apply(Submitted(f"c-{n}", SimpleNamespace(job_id=str(7 + n))))
    ...     _ = fleet.apply(Seen(f"c-{n}", "running", at=started))
    >>> planner = WalltimePlanner(fleet)
    >>> plan.replace_at, planner.replace_due(now=509.0)
    (510.0, [])
    >>> [m.split(":")[0] for m in planner.replace_due(now=510.0)], sorted(fleet.spec)
    (['job c-0 (id 7) nears its walltime', 'job c-1 (id 8) nears its walltime'], ['c-2', 'c-3', 'c-4'])
    """

    def __init__(self, fleet: JobFleet, events: list[str] | None = None) -> None:
        self.fleet = fleet
        self.events: list[str] = [] if events is None else events

    def due(self, now: float) -> list[Retiring]:
        """The running jobs whose workers retire soon, as events (nothing changes here):
        none until one is due, then with it those due within :data:`GATHER_WINDOW`."""
        fleet, near = self.fleet, []  # (name, job id, plan, seconds running)
        for name, record in fleet.records.items():
            plan = fleet.job_pool(name).retirement  # each pool's walltime
            if (plan is None or record.phase is not JobState.RUNNING or record.started is None
                    or name not in fleet.spec):
                continue
            age = now - record.started
            if age >= plan.replace_at - GATHER_WINDOW:
                near.append((name, record.job_id, plan, age))
        if not any(age >= plan.replace_at for _, _, plan, age in near):
            return []
        return [Retiring(name, (
            f"job {name} (id {job_id}) nears its walltime: its workers retire "
            f"from about {max(plan.first_retirement - age, 0):.0f} s from now, their data "
            "moving to other workers; a replacement is submitted"))
            for name, job_id, plan, age in near]

    def replace_due(self, now: float) -> list[str]:
        """Retire the jobs :meth:`due` names and add their replacements (the fleet applies
        the events); the messages added to :attr:`events`, one per job replaced."""
        due = self.due(now)
        for event in due:
            self.fleet.apply(event)
        for event in due:
            self.events.append(event.message)
            logger.info("%s", event.message)
        return [event.message for event in due]
