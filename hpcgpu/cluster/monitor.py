"""Job states, not silence: poll the batch scheduler, keep the table, report failures.

One status command per interval for all of a cluster's jobs. A job that ends is dropped from
the cluster's spec at once (the fix for dask/distributed#9102, where dead grouped workers were
never dropped and adaptive scaling stalled); one that ended before its workers connected is
reported with its state, exit code, first errors and stderr tail, and replaced while fewer than
``max_failed_jobs`` have failed that way (dask-jobqueue#11, #643).
"""

from __future__ import annotations

import asyncio
import logging
import sys
import time

from distributed.core import Status
from distributed.objects import SchedulerInfo

from hpcgpu.system import commands
from hpcgpu.cluster.cpujob import cpu_error_log
from hpcgpu.cluster.faults import status_failed
from hpcgpu.cluster.jobs import (JobInfo, JobRecord, JobTable, failure_report, format_table,
                                 table_columns, table_rows, tail)
from hpcgpu.jobspec.dialects import JobStatus
from hpcgpu.worker.startfailure import exception_lines, storm_lines

__all__ = ["JobMonitor"]

logger = logging.getLogger("hpcgpu.cluster")


class JobMonitor:
    """Mixin for :class:`~hpcgpu.cluster.GPUCluster`: the job table and its upkeep."""

    _records: dict[str, JobRecord]
    failures: list[str]
    events: list[str]
    _status_failures: int = 0

    # ------------------------------------------------------------------ the table
    @property
    def jobs(self) -> JobTable:
        """Every job this cluster submitted, as last polled (oldest first): a tuple of
        :class:`JobInfo` that shows itself as a table (text, HTML, rich)."""
        return JobTable(record.info() for record in self._records.values())

    def job_table(self) -> str:
        """:attr:`jobs` as a plain-text table."""
        return format_table(self.jobs)

    def connected_by_job(self) -> dict[str, set[str]]:
        """Job name -> names of its workers connected to the scheduler now."""
        out: dict[str, set[str]] = {}
        for info in self.scheduler_info.get("workers", {}).values():
            out.setdefault(self.job_key(info["name"]), set()).add(str(info["name"]))
        return out

    def _update_worker_status(self, op, msg):
        super()._update_worker_status(op, msg)
        self._refresh_connected()

    def _refresh_connected(self) -> None:
        connected = self.connected_by_job()
        for name, record in self._records.items():
            record.connected = connected.get(name, set())
            record.fully_started |= len(record.connected) >= record.expected
            if record.connected and record.state in ("submitting", "pending"):
                record.state = "running"

    # ------------------------------------------------------------------ polling
    async def _poll(self) -> None:
        """One status call for all live jobs; handle the ones that ended."""
        live = {r.job_id: r for r in self._records.values() if r.job_id and not r.ended}
        if not live or self.status != Status.running:
            return
        argv = self._dialect.status_argv(sorted(live))
        try:
            result = await asyncio.to_thread(commands.run, argv, timeout=30, check=False)
        except RuntimeError:  # the interpreter is ending: its thread pool takes no more work
            return
        if status_failed(result):
            # Never read a failed status call as "the jobs are gone": keep their last state.
            self._status_failures += 1
            if self._status_failures in (1, 5) or self._status_failures % 30 == 0:
                logger.warning("job status unknown (%d failed polls, jobs keep their last "
                               "state): %s", self._status_failures, commands.CommandError(result))
            return
        if self._status_failures:
            logger.warning("job status available again after %d failed polls",
                           self._status_failures)
            self._status_failures = 0
        statuses = self._dialect.parse_status(result.stdout)
        self._refresh_connected()
        for job_id, record in live.items():
            status = statuses.get(job_id)
            if status is not None:
                record.state, record.nodes = status.state, status.nodes or record.nodes
                record.exit_code = status.exit_code
                if status.state == "running" and record.started is None:
                    record.started = time.monotonic()
                elif status.state == "pending":
                    record.started = None  # requeued: its walltime starts again
            elif time.monotonic() - record.submitted > 2 * self._poll_interval:
                # The scheduler no longer lists it: finished, however it ended.
                status = JobStatus(job_id, "cancelled" if record.cancelled_by_us else "completed")
                record.state = status.state
            if status is not None and status.finished:
                await self._job_ended(record)
        self._replace_expiring()

    async def _job_ended(self, record: JobRecord) -> None:
        record.ended = True
        job = self.workers.get(record.name)
        if job is not None:
            job.ended = True  # nothing left to cancel
        if record.cancelled_by_us:
            record.state = "cancelled"
            return
        if record.exit_code is None and (argv := self._dialect.exit_code_argv(record.job_id)):
            done = await asyncio.to_thread(commands.run, argv, timeout=30, check=False)
            record.exit_code = self._dialect.parse_exit_code(done.stdout)
        if record.exit_code not in (None, 0) and record.state == "completed":
            record.state = "failed"
        log = self._error_log(record)
        text = tail(log, 5000)  # read once: its tail is shown, its errors are named
        storm = storm_lines(text)  # workers that connected, then died again and again
        if not record.fully_started or storm:  # a job whose second GPU's worker failed too
            record.state = "failed" if storm else record.state
            record.stderr_tail = "\n".join(text.splitlines()[-self._tail_lines:]) or "(empty)"
            report = failure_report(record.info(), log, storm or exception_lines(text),
                                    *(["ended: its workers were restarted again and again"] * bool(storm)))
            self.failures.append(report)
            logger.error("%s", report)
        elif record.retiring:
            logger.info("job %s (%s) ended near its walltime: %s", record.name, record.job_id,
                        record.state)
        else:
            message = (f"job {record.name} (id {record.job_id}) ended while its workers were "
                       f"connected: state {record.state}, exit code {record.exit_code}; tasks "
                       "and data held only by its workers are recomputed elsewhere")
            self.events.append(message)
            logger.warning("%s", message)
        # dask/distributed#9102: drop the dead job from the spec so that plans and
        # adaptive scaling see it gone, then replace it up to the failure limit.
        self.worker_spec.pop(record.name, None)
        if job is not None:
            self.workers.pop(record.name, None)
            await job.close()
        self._replace_ended()

    def _error_log(self, record: JobRecord) -> str:
        setup = self._job_pool(record.name).setup
        if setup.cpu:
            return cpu_error_log(self._dialect.name, setup.log_directory, setup.shape.job_name,
                                 record.name, record.job_id)
        return self._dialect.error_log(setup.shape.job_name, record.job_id, setup.log_directory)

    def _replace_ended(self) -> None:
        missing = {pool: self._targets.get(pool, 0) - len(self._jobs_of(pool))
                   for pool in self._pools}
        if max(missing.values()) <= 0 or self.status != Status.running:
            return
        if len(self.failures) >= self._max_failed_jobs:
            logger.error(
                "%d job(s) ended before their workers connected; not submitting more "
                "(max_failed_jobs=%d). See cluster.failures and cluster.job_table().",
                len(self.failures), self._max_failed_jobs,
            )
            if getattr(self, "_adaptive", None) is not None:
                self._adaptive.stop(reason="jobs-failed-to-start")
            return
        for pool, count in missing.items():
            for _ in range(count):
                self.worker_spec.update(self.new_worker_spec(pool))
        self.loop.add_callback(self._correct_state)

    # ------------------------------------------------------------------ waiting
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
            self._pool(pool)  # a ValueError names the pools
        return self.sync(self._wait_for_gpus, wanted, timeout, pool)

    async def _wait_for_gpus(self, wanted: int, timeout: float | None,
                             pool: str | None = None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        show = _Progress(wanted)
        try:
            while True:
                self.scheduler_info = SchedulerInfo(await self.scheduler_comm.identity())
                self._refresh_connected()
                running = sum(
                    w.get("status") == "running" for w in self.scheduler_info["workers"].values()
                    if pool is None or self._worker_pool(str(w["name"])) == pool
                )
                show.update(running, self.jobs)
                if running >= wanted:
                    return
                planned = sum(self._job_pool(job).workers_per_job for job in self.worker_spec
                              if pool is None or self._job_pool(job).name == pool)
                if self.failures and (planned < wanted or running == 0 and _network_only(self.failures)):
                    raise RuntimeError(
                        f"{wanted} workers cannot connect: jobs ended before their "
                        "workers connected:\n" + "\n".join(self.failures)
                    )
                if deadline is not None and time.monotonic() > deadline:
                    raise TimeoutError(
                        f"{running} of {wanted} workers connected after {timeout} s; "
                        f"jobs:\n{self.job_table()}"
                    )
                await asyncio.sleep(0.2)
        finally:
            show.close()


def _network_only(failures: list[str]) -> bool:
    """Every failed job's workers found the network unusable from their host (their interface
    missing, the scheduler unreachable): replacements would meet the same, so waiting for them
    only delays the error (hpcgpu.worker.reach)."""
    return all("NetworkCheckError:" in report for report in failures)


class _Progress:
    """rich in a terminal; elsewhere (a batch job's log, a pipe) a line on ``stream`` at each
    change, and every ``interval`` s while nothing changes, so the log shows what is awaited.

    Examples
    --------
    >>> import io
    >>> out, now = io.StringIO(), [0.0]
    >>> show = _Progress(2, stream=out, interval=30, clock=lambda: now[0])
    >>> show.update(0, []); show.update(0, []); now[0] = 31; show.update(0, [])
    >>> print(out.getvalue(), end="")
    hpcgpu: 0/2 workers connected; jobs  (0 s)
    hpcgpu: 0/2 workers connected; jobs  (31 s)
    """

    def __init__(self, wanted: int, stream=None, interval: float = 30.0,
                 clock=time.monotonic) -> None:
        self.wanted, self.last, self.live = wanted, None, None
        self.stream, self.interval, self.clock = stream or sys.stderr, interval, clock
        self.started = self.printed = clock()
        if stream is None and sys.stdout.isatty():
            from rich.live import Live

            self.live = Live(auto_refresh=False, transient=True)
            self.live.start()

    def update(self, running: int, jobs: list[JobInfo]) -> None:
        states = ", ".join(f"{j.name}:{j.state}" for j in jobs)
        summary = f"{running}/{self.wanted} workers connected; jobs {states}"
        now = self.clock()
        if summary == self.last and (self.live is not None or now - self.printed < self.interval):
            return
        self.last, self.printed = summary, now
        if self.live is not None:
            from rich.table import Table

            table = Table(title=f"{running}/{self.wanted} workers connected")
            columns = table_columns(jobs)[:-1]  # the job table without its exit-code column
            for column in columns:
                table.add_column(column)
            for row in table_rows(jobs):
                table.add_row(*row[:len(columns)])
            self.live.update(table, refresh=True)
        else:
            print(f"hpcgpu: {summary} ({now - self.started:.0f} s)", file=self.stream, flush=True)

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
