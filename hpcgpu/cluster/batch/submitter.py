"""The reconciler: make the batch system match the fleet's spec, in whole jobs.

SpecCluster's ``_correct_state`` compares the desired jobs (``worker_spec``) with the started
ones (``workers``). Here, jobs taken out of the spec have their workers retired by name first
(their data moves to other workers), then are cancelled with one command; jobs left to
retire near their walltime are not cancelled while the cluster runs. New entries become
jobs, several at once as one array (:mod:`hpcgpu.cluster.batch.arrays`), and are submitted
together; a failed submission is the monitor's to report. What happened to each job goes to
the fleet as an event; the submitter writes nothing of the fleet's itself.
"""

from __future__ import annotations

import asyncio
from typing import Any, Awaitable, Callable

from hpcgpu.cluster.batch.admission import JobGate
from hpcgpu.cluster.batch.faults import cancel_together
from hpcgpu.cluster.batch.fleet import JobFleet
from hpcgpu.cluster.batch.job_events import Submitted

__all__ = ["JobSubmitter"]


class JobSubmitter:
    """Submit the fleet's new jobs, retire and cancel the ones it dropped.

    Parameters
    ----------
    fleet : JobFleet
    monitor : JobMonitor
        Told of failed submissions.
    dialect : Dialect
        The scheduler's cancel command.
    address : callable
        () -> the scheduler address the workers connect to.
    connected : callable
        () -> job name -> names of its workers connected now.
    retire : callable
        async (worker names) -> retire them, their data moving to other workers.
    adopt : callable
        (job) -> what the cluster does with each job submitted (SpecCluster's bookkeeping).
    """

    def __init__(self, fleet: JobFleet, monitor: Any, dialect: Any, *,
                 address: Callable[[], str], connected: Callable[[], dict[str, set[str]]],
                 retire: Callable[[list[str]], Awaitable[Any]],
                 adopt: Callable[[Any], Any]) -> None:
        self.fleet, self.monitor, self.dialect = fleet, monitor, dialect
        self.address, self.connected, self.retire, self.adopt = address, connected, retire, adopt
        #: Which new jobs go out now, under the caps on queued and running jobs.
        self.gate = JobGate(fleet)

    async def correct(self, running: bool) -> None:
        """One reconciliation (under the cluster's lock)."""
        fleet = self.fleet
        retiring = fleet.retiring() if running else set()
        to_close = set(fleet.jobs) - set(fleet.spec) - retiring
        if to_close:
            connected = self.connected()
            names = sorted(n for job in to_close for n in connected.get(job, ()))
            if names:
                await self.retire(names)
            fleet.cancelling(to_close)
            await cancel_together(self.dialect, [fleet.jobs[j] for j in to_close if j in fleet.jobs])
            fleet.cancelled(to_close)
        await self.open(*self.gate.choose(set(fleet.spec) - set(fleet.jobs)))

    async def open(self, names: list[str], rooms: dict[str, int | None] | None = None) -> None:
        """Make and submit the jobs of new entries ``names`` (``rooms``: pool -> the most of
        its new jobs that may run at once, :class:`JobGate`). A rejected submission is
        reported once, by the monitor (``cluster.failures``; waiting for workers raises
        it): raising here reached the event loop as a second traceback."""
        if not names:
            return
        jobs = await self.fleet.make_jobs(self.address(), list(names), rooms)  # several: arrays
        results = await asyncio.gather(*(_submit(job) for job in jobs.values()),
                                       return_exceptions=True)
        for (name, job), error in zip(jobs.items(), results):
            if isinstance(error, BaseException):
                self.monitor.submit_failed(name, error)
                continue
            self.adopt(job)
            self.fleet.apply(Submitted(name, job))


async def _submit(job: Any) -> Any:
    await job
    return job
