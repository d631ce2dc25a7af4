"""``BatchCluster``: dask-jobqueue's ``JobQueueCluster`` holding its batch jobs as parts.

The parts own the state; the cluster wires them to ``SpecCluster``'s hooks:

- ``fleet`` (:class:`~hpcgpu.cluster.batch.fleet.JobFleet`): pools, the spec entry of each job,
  records and targets; its ``spec`` and ``jobs`` are SpecCluster's ``worker_spec`` and
  ``workers``;
- ``submitter`` (:class:`~hpcgpu.cluster.batch.submitter.JobSubmitter`): the reconciler, run by
  ``_correct_state``: new entries become jobs (arrays where it can), dropped jobs retire
  whole, then are cancelled;
- ``monitor`` (:class:`~hpcgpu.cluster.batch.monitor.JobMonitor`): job states every
  ``poll_interval``, ends, failures and events;
- ``walltime`` (:class:`~hpcgpu.cluster.batch.walltime_planner.WalltimePlanner`): replacements
  of jobs near their walltime.

:class:`~hpcgpu.cluster.GPUCluster` adds the job shape, the network and the pools.
"""

from __future__ import annotations

import logging
import time
import weakref
from typing import Any

from dask.utils import parse_timedelta
from distributed.core import Status
from tornado.ioloop import PeriodicCallback

from hpcgpu.system import config
from hpcgpu.system.jobqueue import JobQueueCluster
from hpcgpu.system.threadsignals import block_here
from hpcgpu.cluster.batch.arrays import ArraySettings, JobArrays
from hpcgpu.cluster.batch.fleet import JobFleet
from hpcgpu.cluster.batch.job_table import JobTable, format_table, html_table
from hpcgpu.cluster.batch.logs import DEFAULT_LINES, gather_logs
from hpcgpu.cluster.batch.monitor import JobMonitor
from hpcgpu.cluster.batch.pools import DEFAULT_POOL
from hpcgpu.cluster.batch.private import PrivateDirectory, worker_credentials
from hpcgpu.cluster.batch.progress import wait_for_workers
from hpcgpu.cluster.batch.reachback import ReachBack, port_ranges
from hpcgpu.cluster.versions import VersionWatch
from hpcgpu.cluster.batch.scheduler_job import worker_address
from hpcgpu.cluster.batch.silence import heartbeat_source
from hpcgpu.cluster.shutdown import SCHEDULER_ANSWER, end_workers, scheduler_gone, watch
from hpcgpu.cluster.batch.submitter import JobSubmitter
from hpcgpu.cluster.batch.walltime_planner import WalltimePlanner

__all__ = ["BatchCluster"]

logger = logging.getLogger("hpcgpu.cluster")


class BatchCluster(JobQueueCluster):
    """A ``JobQueueCluster`` whose jobs are held by parts (see the module).

    Parameters
    ----------
    job_dialect : Dialect
        The batch scheduler's commands and words (``dialect`` is a job option).
    network : NetworkSettings
        Where the workers reach the scheduler.
    arrays : ArraySettings
        Whether and how new jobs are submitted as arrays.
    private_directory : PrivateDirectory
        Where the workers' credentials are written (removed when the cluster ends).
    reach_back : bool
        Whether the scheduler runs in this process, so that each new worker's ports must
        answer from here (:class:`~hpcgpu.cluster.batch.reachback.ReachBack`).
    poll_interval, max_failed_jobs
        As :class:`~hpcgpu.cluster.GPUCluster`'s (default: the ``hpcgpu`` configuration).
    requeue : bool
        As :class:`~hpcgpu.cluster.GPUCluster`'s: a job the scheduler requeues keeps its
        place (True) or is cancelled and replaced at once (False).
    **kwargs
        ``JobQueueCluster``'s.
    """

    def __init__(self, *, job_dialect: Any, network: Any, arrays: ArraySettings,
                 private_directory: PrivateDirectory, poll_interval: Any = None,
                 max_failed_jobs: int | None = None, reach_back: bool = True,
                 requeue: bool = False, **kwargs: Any) -> None:
        self._dialect = dialect = job_dialect
        self.network = network
        #: Credentials and job files, for the user's eyes only (hpcgpu.cluster.batch.private).
        self.private_directory = private_directory
        self.fleet = JobFleet(self._new_worker_name, arrays=JobArrays(arrays, dialect))
        self.monitor = JobMonitor(
            self.fleet, dialect, connected=self.connected_by_job,
            poll_interval=parse_timedelta(poll_interval or config.get("poll-interval")),
            tail_lines=int(config.get("stderr-tail-lines")),
            max_failed_jobs=int(max_failed_jobs or config.get("max-failed-jobs")),
            running=lambda: self.status == Status.running, reconcile=self._reconcile_soon,
            give_up=self._stop_adaptive, keep_requeued=bool(requeue),
            scheduler=lambda: heartbeat_source(self.scheduler, self.scheduler_comm))
        self.walltime = WalltimePlanner(self.fleet, self.monitor.events)
        self.submitter = JobSubmitter(
            self.fleet, self.monitor, dialect, connected=self.connected_by_job,
            address=lambda: worker_address(self.scheduler, self.network),
            retire=self._retire_workers, adopt=self._adopt)
        #: Job name of a worker (picklable: the scheduler runs it for adaptive scaling).
        self.job_key = self.fleet.job_key
        #: The workers' ports as this host reaches them (None: the scheduler is elsewhere).
        self.reach = ReachBack(lambda: self.security.get_connection_args("client") if self.security else {},
                               self._describe_worker) if reach_back else None
        self.versions = VersionWatch()  # each joining worker's hpcgpu, dask, distributed
        super().__init__(**kwargs)
        # The fleet's desired and started jobs are the dicts SpecCluster reconciles.
        self.fleet.spec, self.fleet.jobs = self.worker_spec, self.workers
        self._finalizer = watch(self, dialect, self.fleet.submitted, private_directory)

    # ------------------------------------------------------------------ lifecycle
    async def _start(self):
        block_here()  # the loop's thread, and the threads it starts: stop signals to the main one
        if "hpcgpu-poll" not in self.periodic_callbacks:
            self.periodic_callbacks["hpcgpu-poll"] = PeriodicCallback(
                self._poll, self.monitor.poll_interval * 1000)
        await super()._start()

    async def _close(self):
        """Stop the workers through their nannies and let their jobs end by themselves,
        then upstream's close (which cancels what is left, pending jobs included, and stops
        the scheduler): no job is cancelled while its workers close (docs/reliability.md)."""
        if self.status == Status.running and self.scheduler_comm is not None:
            poll = self.periodic_callbacks.pop("hpcgpu-poll", None)
            if poll is not None:
                poll.stop()  # no status polls while closing (nor after the thread pool's end)
            try:
                if scheduler_gone(self):
                    raise ConnectionError("the scheduler has stopped")
                await end_workers(self)
            except Exception as error:  # the scheduler may be gone: cancelling still works
                logger.warning("closing without the scheduler (%s): cancelling the jobs",
                               str(error) or type(error).__name__)
                if scheduler_gone(self):
                    self.shutdown_scheduler = False  # nothing left to stop, nor to reach
                else:  # one that does not answer: no 30 s connect in upstream's terminate
                    self.scheduler_comm.timeout = SCHEDULER_ANSWER
        if hasattr(self, "fleet"):  # upstream's close scales to 0 through scale(0): one pool
            self.fleet.clear()
        if getattr(self, "reach", None) is not None:  # None: not checked; absent: failed before it
            self.reach.close()
        await super()._close()
        self.private_directory.remove()  # the jobs are gone: their credentials go too

    def _get_worker_security(self, security):
        """Write the temporary certificate to files in the private directory (dask-jobqueue
        writes them into ``shared_temp_directory`` itself, readable as the umask allows, and
        leaves them there): job scripts name the files, never carry the key."""
        return worker_credentials(security, lambda: self.private_directory.path)

    # ------------------------------------------------------------------ spec -> jobs
    async def _correct_state_internal(self) -> None:
        """Upstream's reconciliation, but a job's workers are retired (by name, so their
        data moves) before the job is cancelled (:class:`JobSubmitter`)."""
        async with self._lock:
            self._correct_state_waiting = None
            await self.submitter.correct(running=self.status == Status.running)

    async def _retire_workers(self, names: list[str]) -> None:
        if self.scheduler.status == Status.running:
            await self.scheduler_comm.retire_workers(names=names, close_workers=True,
                                                     remove=True)

    def _adopt(self, job: Any) -> None:
        job._cluster = weakref.ref(self)  # what SpecCluster does with its workers
        self._created.add(job)

    def _reconcile_soon(self) -> None:
        self.loop.add_callback(self._correct_state)

    def _stop_adaptive(self) -> None:
        if getattr(self, "_adaptive", None) is not None:
            self._adaptive.stop(reason="jobs-failed-to-start")

    async def _poll(self) -> None:
        """Job states (:class:`JobMonitor`), then replacements of jobs near their walltime."""
        if self.status == Status.running and await self.monitor.poll():
            self._replace_expiring()

    def _replace_expiring(self) -> None:
        """Jobs near their walltime: replacements (:class:`WalltimePlanner`)."""
        if self.status == Status.running and self.walltime.replace_due(time.monotonic()):
            self._reconcile_soon()

    def new_worker_spec(self, pool: str = DEFAULT_POOL) -> dict:
        """The next job's spec entry (:meth:`JobFleet.new_entry`)."""
        return self.fleet.new_entry(pool)

    async def retire_jobs(self, jobs: list[str]) -> None:
        """Retire every worker of ``jobs`` (their data moves first), then cancel the jobs."""
        self.fleet.retire(jobs)
        await self._correct_state()

    async def scale_down(self, workers):
        """Remove the jobs of ``workers`` (worker or job names): always whole jobs."""
        await self.retire_jobs(sorted({w if w in self.worker_spec else self.job_key(w)
                                       for w in workers}))

    # ------------------------------------------------------------------ jobs
    @property
    def jobs(self) -> JobTable:
        """Every job this cluster submitted, as last polled (oldest first): a tuple of
        :class:`JobInfo` that shows itself as a table (text, HTML, rich)."""
        return self.fleet.table()

    def job_table(self) -> str:
        """:attr:`jobs` as a plain-text table."""
        return format_table(self.jobs)

    async def _get_logs(self, cluster=True, scheduler=True, workers=True, jobs=True,
                        lines=DEFAULT_LINES):
        return await gather_logs(self, cluster_log=cluster, scheduler=scheduler,
                                 workers=workers, jobs=jobs, lines=lines)

    def get_logs(self, cluster=True, scheduler=True, workers=True, jobs=True,
                 lines=DEFAULT_LINES):
        """The cluster's, the Dask scheduler's, and per job its stdout/stderr files (ended
        jobs too, until pruned) and its workers' Dask logs: the last ``lines`` lines of each
        (None: all). See :func:`hpcgpu.cluster.batch.logs.gather_logs`.

        Examples
        --------
        >>> logs = cluster.get_logs(lines=20)  # doctest: +SKIP
        >>> print(logs["job SLURMCluster-0 (4242) stderr"])  # doctest: +SKIP
        """
        return self.sync(self._get_logs, cluster=cluster, scheduler=scheduler,
                         workers=workers, jobs=jobs, lines=lines)

    logs = get_logs  # the name users of older distributed and dask-jobqueue know

    @property
    def failures(self) -> list[str]:
        """Reports of jobs that ended before their workers connected."""
        return self.monitor.failures

    @property
    def events(self) -> list[str]:
        """What happened to running jobs: walltime replacements, unexpected ends."""
        return self.monitor.events

    def connected_by_job(self, workers: dict | None = None) -> dict[str, set[str]]:
        """Job name -> names of its workers connected to the scheduler now (or in ``workers``,
        a snapshot of the scheduler's)."""
        out: dict[str, set[str]] = {}
        for info in (self.scheduler_info.get("workers", {}) if workers is None else workers).values():
            out.setdefault(self.job_key(info["name"]), set()).add(str(info["name"]))
        return out

    def _describe_worker(self, info: dict) -> tuple[str, dict]:
        """A worker's words in messages (its name, job and node) and its pool's port ranges."""
        name = str(info.get("name"))
        record = self.fleet.records.get(self.job_key(name))
        where = ""
        if record is not None and record.job_id:
            where = f" (job {record.job_id}{' on ' + record.nodes[0] if len(record.nodes) == 1 else ''})"
        pool = self.fleet.pools.get(self.fleet.worker_pool(name))
        extra = pool.spec["options"].get("worker_extra_args") or () if pool is not None else ()
        return f"worker {name!r}{where}", port_ranges(extra)

    def _update_worker_status(self, op, msg):
        if op == "add":
            self.versions.watch(msg.get("workers", {}))
        if op == "add" and self.reach is not None:
            self.reach.watch(dict(msg.get("workers", {})))
        elif op == "remove" and self.reach is not None:
            self.reach.left(msg)
        super()._update_worker_status(op, msg)
        self.fleet.refresh(self.connected_by_job())

    def wait_for_workers(self, n_workers: int | None = None, timeout: float | None = None,
                         *, gpus: int | None = None, pool: str | None = None) -> None:
        """Block until ``n_workers`` (or ``gpus``) GPU workers are connected, showing job states.
        With pools, every pool's workers count, or only those of ``pool``.

        Raises ``RuntimeError`` with the failure reports when jobs end before their workers
        connect and no more will be submitted, and ``TimeoutError`` with the job table.
        """
        wanted = gpus if gpus is not None else n_workers
        if not isinstance(wanted, int) or wanted < 1:
            raise ValueError(f"n_workers={wanted!r} must be a whole number of at least 1")
        if pool is not None:
            self.fleet.pool(pool)  # a ValueError names the pools
        return self.sync(self._wait_for_gpus, wanted, timeout, pool)

    async def _wait_for_gpus(self, wanted: int, timeout: float | None,
                             pool: str | None = None) -> None:
        async def workers() -> dict:
            # A snapshot, not a new ``scheduler_info``: the worker-status stream keeps that, and
            # a snapshot taken after a worker left but read before the stream's "remove" would
            # make that event name a worker it no longer holds (a KeyError in SpecCluster).
            snapshot = (await self.scheduler_comm.identity())["workers"]
            self.fleet.refresh(self.connected_by_job(snapshot))
            return snapshot

        await wait_for_workers(wanted, timeout, workers=workers, fleet=self.fleet,
                               failures=self.failures, pool=pool, reach=self.reach)

    def _repr_html_(self, cluster_status=None):
        return super()._repr_html_(cluster_status) + html_table(self.jobs)
