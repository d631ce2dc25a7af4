"""Adaptive scaling in whole jobs.

distributed's ``Adaptive`` counts workers; with several GPU workers per job its plan and
the scheduler's suggestions disagree about granularity and it loops submitting and
cancelling jobs (dask-jobqueue#498), and it retires single workers of a job whose other
workers the cancel then kills. :class:`GPUAdaptive` decides in jobs: the target is rounded up
to whole jobs, pending jobs are dropped first, and a running job is retired only when the
scheduler agrees that ALL its workers can go (``workers_to_close`` grouped by job); their data
moves to other workers (``retire_workers``) before the job is cancelled.
"""

from __future__ import annotations

import math
from typing import Any

from distributed.deploy.adaptive import Adaptive
from distributed.protocol import pickle

__all__ = ["GPUAdaptive", "job_of_worker"]


def job_of_worker(worker: Any, levels: int = 2) -> str:
    """The job a worker belongs to: its name without ``-<node>-<gpu>`` (``levels`` parts;
    CPU workers: ``-<i>`` with several processes per job, none with one).

    Takes a ``WorkerState`` or a name.

    >>> job_of_worker("SLURMCluster-3-1-2")
    'SLURMCluster-3'
    >>> job_of_worker("SLURMCluster-3-1", levels=1), job_of_worker("SLURMCluster-3", levels=0)
    ('SLURMCluster-3', 'SLURMCluster-3')
    """
    name = str(getattr(worker, "name", worker))
    return name.rsplit("-", levels)[0] if levels else name


class GPUAdaptive(Adaptive):
    """``Adaptive`` that adds and removes whole jobs of ``gpus_per_job`` workers."""

    def __init__(self, cluster: Any, gpus_per_job: int, job_key: Any = job_of_worker,
                 **kwargs: Any) -> None:
        self.gpus_per_job = gpus_per_job
        self.job_key = job_key
        kwargs.setdefault("worker_key", job_key)
        super().__init__(cluster, **kwargs)

    async def recommendations(self, target: int) -> dict:
        """Compare jobs, not workers: ``up`` with a worker count that is whole jobs,
        ``down`` with job names."""
        cluster = self.cluster
        if len(self.plan) != len(self.requested):
            await cluster
        want = math.ceil(target / self.gpus_per_job)
        have = list(cluster.worker_spec)
        if want >= len(have):
            self.close_counts.clear()
            if want == len(have):
                return {"status": "same"}
            return {"status": "up", "n": want * self.gpus_per_job}
        connected = cluster.connected_by_job()
        pending = [job for job in reversed(have) if not connected.get(job)]
        to_close = set(pending[: len(have) - want])
        if len(to_close) < len(have) - want:
            to_close |= await self._idle_jobs(want, connected)
        firmly = self._firmly(to_close)
        return {"status": "down", "workers": sorted(firmly)} if firmly else {"status": "same"}

    def _firmly(self, to_close: set[str]) -> set[str]:
        """The jobs of ``to_close`` chosen ``wait_count`` times in a row (distributed's
        hysteresis, per job): those are closed now; the others start counting again."""
        firmly = set()
        for job in to_close:
            self.close_counts[job] += 1
            if self.close_counts[job] >= self.wait_count:
                firmly.add(job)
        for job in list(self.close_counts):
            if job in firmly or job not in to_close:
                del self.close_counts[job]
        return firmly

    async def _idle_jobs(self, want: int, connected: dict[str, set[str]]) -> set[str]:
        # Grouped by job, no count: the scheduler stops at the first busy job and keeps
        # enough memory for the data held (memory_ratio), so no busy worker is chosen.
        names = await self.scheduler.workers_to_close(
            key=pickle.dumps(self.job_key), attribute="name",
            minimum=want * self.gpus_per_job,
        )
        chosen = {self.job_key(n) for n in names}
        return {job for job in chosen
                if job in connected and connected[job] <= set(map(str, names))}

    async def scale_down(self, workers: list[str]) -> None:
        """Retire all workers of the jobs ``workers`` (job names), then cancel the jobs."""
        if workers:
            await self.cluster.retire_jobs(list(workers))
