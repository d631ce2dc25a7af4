"""Walltime-aware retirement, the cluster's side: replace a job before its workers retire.

Each running job's workers retire on their own before the walltime
(:mod:`hpcgpu.worker.walltime`). ``replace_ahead`` seconds before the first of them may retire,
the planner marks the job *retiring*, takes it out of the fleet's spec (so ``scale``/``adapt``
count its replacement instead) and adds the replacement; the retiring job is not cancelled but
left to end by itself, its workers handing their data to the others first. Closing the cluster
still cancels it. The plan of each pool is its :class:`~hpcgpu.jobspec.walltime.Retirement`.
"""

from __future__ import annotations

import logging

from hpcgpu.cluster.fleet import JobFleet

__all__ = ["WalltimePlanner"]

logger = logging.getLogger("hpcgpu.cluster")


#: seconds: jobs whose replacement falls due within this of the first due go out with it, in
#: one submit (one array): the elements of one array start over a few scheduler passes, and
#: each is seen running at its own poll
GATHER_WINDOW = 5.0


class WalltimePlanner:
    """Which jobs near their walltime, and their replacements in ``fleet``; each
    replacement is told in ``events`` (the cluster's) and the log.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> from hpcgpu.cluster.job_table import JobRecord
    >>> from hpcgpu.cluster.pools import Pool
    >>> from hpcgpu.jobspec.walltime import Retirement
    >>> fleet = JobFleet(lambda n: f"c-{n}")
    >>> plan = Retirement.create(600, 60, 0, 30)
    >>> fleet.add_pool(Pool("default", SimpleNamespace(cpu=False, shape=None), plan, {}))
    >>> fleet.grow(1)
    >>> record = fleet.records["c-0"] = JobRecord("c-0", expected=4, started=0.0)
    >>> planner = WalltimePlanner(fleet)
    >>> planner.replace_due(now=10.0)
    []
    >>> [m.split(":")[0] for m in planner.replace_due(now=600.0)], list(fleet.spec)
    (['job c-0 (id None) nears its walltime'], ['c-1'])
    """

    def __init__(self, fleet: JobFleet, events: list[str] | None = None) -> None:
        self.fleet = fleet
        self.events: list[str] = [] if events is None else events

    def replace_due(self, now: float) -> list[str]:
        """Mark the jobs whose workers retire soon, add their replacements to the spec;
        the messages added to :attr:`events`, one per job replaced."""
        fleet, replaced = self.fleet, []
        for name, record in fleet.records.items():
            plan = fleet.job_pool(name).retirement  # each pool's walltime
            if (plan is None or record.started is None or record.retiring or record.ended
                    or name not in fleet.spec or now - record.started < plan.replace_at - GATHER_WINDOW):
                continue
            record.retiring = True
            del fleet.spec[name]
            replaced.append(name)
        messages = []
        for name in replaced:
            pool = fleet.job_pool(name)
            fleet.grow(1, pool.name)
            plan, record = pool.retirement, fleet.records[name]
            left = max(plan.first_retirement - (now - record.started), 0)
            messages.append(
                f"job {name} (id {record.job_id}) nears its walltime: its workers retire "
                f"from about {left:.0f} s from now, their data moving to other workers; "
                "a replacement is submitted")
            self.events.append(messages[-1])
            logger.info("%s", messages[-1])
        return messages
