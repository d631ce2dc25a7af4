"""Job states, not silence: poll the batch scheduler, keep the table, report failures.

One status command per interval for all of a cluster's jobs. A job that ends is dropped from
the fleet's spec at once (the fix for dask/distributed#9102, where dead grouped workers were
never dropped and adaptive scaling stalled); one that ended before its workers connected is
reported with its state, exit code, first errors and stderr tail, and replaced while fewer than
``max_failed_jobs`` have failed that way (dask-jobqueue#11, #643), except one that failed at once
(:data:`AT_ONCE`): its replacement would run the same script the same way, so none is submitted
and waiting for workers fails with its report after that first job. One the scheduler puts back
in its queue after it ran (SLURM requeues the jobs of a failed node by default, ``JobRequeue=1``,
then holds them about two minutes) has lost its workers: unless the cluster asked for requeues
(``requeue=True``), it is cancelled and replaced at once, like a job that ended.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import time
from typing import Any, Callable

from hpcgpu.system import commands
from hpcgpu.cluster.batch.faults import cancel_together, status_failed
from hpcgpu.cluster.batch.fleet import JobFleet
from hpcgpu.cluster.batch.job_events import Ended, Requeued, Seen, SubmitFailed, end_of
from hpcgpu.cluster.batch.job_kinds import kind_of
from hpcgpu.cluster.batch.job_state import JobState
from hpcgpu.cluster.batch.job_table import JobRecord, failure_report, tail
from hpcgpu.cluster.batch.silence import (heartbeat_ages, link_line, silence_message, silent_after,
                                          silent_hosts)
from hpcgpu.worker.startfailure import exception_lines, storm_lines

__all__ = ["AT_ONCE", "JobMonitor"]

logger = logging.getLogger("hpcgpu.cluster")

#: Seconds: a job that exits non-zero within this time of starting (or before a poll saw it
#: run), no worker of it ever connected, failed in its script or its environment (a launcher
#: option the site's MPI refuses, a python that is not there), not on a bad node.
AT_ONCE = 10.0


def _nothing() -> None:
    return None


class JobMonitor:
    """The fleet's jobs as the batch scheduler sees them: states, ends, failures, events.

    Parameters
    ----------
    fleet : JobFleet
        The jobs it polls; what it sees goes to the fleet as events (a job seen, ended,
        requeued), which the fleet applies to the records, the spec and the started jobs.
    dialect : Dialect
        The scheduler's status, exit-code and log-file words.
    poll_interval : float
        Seconds between polls (a job the scheduler no longer lists after two is gone).
    tail_lines, max_failed_jobs : int
        Lines of stderr kept for a job that failed to start; failures before giving up.
    connected : callable
        () -> job name -> names of its workers connected now.
    running : callable
        () -> whether the cluster runs (no replacement jobs otherwise).
    reconcile, give_up : callable
        Called when the spec changed (the cluster's ``_correct_state``), and once jobs
        stop being replaced (stops adaptive scaling).
    keep_requeued : bool
        A job the scheduler requeued after it ran stays, pending, and its workers start again
        when it runs (the cluster's ``requeue=True``); otherwise it is cancelled and replaced.
    scheduler : callable
        () -> the in-process Dask scheduler, whose workers' heartbeats say which host went
        quiet (:mod:`hpcgpu.cluster.batch.silence`); None where it runs elsewhere.
    """

    def __init__(self, fleet: JobFleet, dialect: Any, *, poll_interval: float,
                 tail_lines: int, max_failed_jobs: int,
                 connected: Callable[[], dict[str, set[str]]] = dict,
                 running: Callable[[], bool] = lambda: True,
                 reconcile: Callable[[], Any] = _nothing,
                 give_up: Callable[[], Any] = _nothing, keep_requeued: bool = False,
                 scheduler: Callable[[], Any] = _nothing) -> None:
        self.fleet, self.dialect = fleet, dialect
        self.poll_interval, self.tail_lines = poll_interval, tail_lines
        self.max_failed_jobs = max_failed_jobs
        self.connected, self.running = connected, running
        self.reconcile, self.give_up = reconcile, give_up
        self.keep_requeued, self.scheduler = keep_requeued, scheduler
        self._silent: set[tuple[str, str]] = set()  # (job, host) said silent already
        #: Reports of jobs that ended before their workers connected (or failed to submit).
        self.failures: list[str] = []
        #: What happened to running jobs: walltime replacements, unexpected ends.
        self.events: list[str] = []
        self.status_failures = 0
        #: A job failed at once (:data:`AT_ONCE`): replacements would fail the same way.
        self.failed_at_once = False
        self._asked = False

    @property
    def gave_up(self) -> bool:
        """Too many jobs failed to start, or one failed at once: submit no more."""
        return self.failed_at_once or len(self.failures) >= self.max_failed_jobs

    def may_submit(self) -> bool:
        """False, said in the log, once too many jobs failed to start."""
        if self.gave_up:
            logger.error("not submitting jobs: %d failed to start (max_failed_jobs=%d)",
                         len(self.failures), self.max_failed_jobs)
        return not self.gave_up

    def submit_failed(self, name: str, error: BaseException) -> None:
        """Job ``name`` could not be submitted: its record ends, the spec drops it."""
        self.fleet.apply(SubmitFailed(name, str(error)))
        self.failures.append(f"submitting job {name} failed: {error}")
        logger.error("submitting job %s failed: %s", name, error)

    # ------------------------------------------------------------------ polling
    async def poll(self) -> bool:
        """One status call for all live jobs; handle the ones that ended. False when
        there was nothing to ask or the scheduler did not answer."""
        live = self.fleet.live()
        if not live:
            return False
        argv = self.dialect.status_argv(sorted(live))
        try:
            result = await asyncio.to_thread(commands.run, argv, timeout=30, check=False)
        except RuntimeError:  # the interpreter is ending: its thread pool takes no more work
            return False
        if status_failed(result):
            # Never read a failed status call as "the jobs are gone": keep their last state.
            self.status_failures += 1
            if self.status_failures in (1, 5) or self.status_failures % 30 == 0:
                logger.warning("job status unknown (%d failed polls, jobs keep their last "
                               "state): %s", self.status_failures, commands.CommandError(result))
            return False
        if self.status_failures:
            logger.warning("job status available again after %d failed polls",
                           self.status_failures)
            self.status_failures = 0
        statuses = self.dialect.parse_status(result.stdout)
        self._asked = False  # whether this poll asked for a reconciliation
        self.fleet.refresh(self.connected())
        await self._watch_heartbeats()
        now = time.monotonic()
        for job_id, name in live.items():
            before = self.fleet.records[name]
            seen = Seen.of(before, statuses.get(job_id), now, 2 * self.poll_interval)
            if seen is None:
                continue
            self.fleet.apply(seen)
            if self._on_excluded_host(name, seen):
                await self._cancel_and_replace(name)
            elif seen.finished:
                await self._job_ended(name)
            elif before.started is not None and seen.state == "pending" and not seen.nodes:
                # running at the last poll, back in the queue now (a suspended job keeps its nodes)
                await self._requeued(name, seen)
        if self.fleet.waiting() and self.running() and not self._asked:
            self.reconcile()  # jobs held back by a cap go out as others start or end
        return True

    async def _job_ended(self, name: str) -> None:
        record = self.fleet.records[name]
        if record.cancelled_by_us:
            self.fleet.apply(Ended(name, JobState.CANCELLED))
            return
        exit_code, nodes = record.exit_code, ()
        if exit_code is None and (argv := self.dialect.exit_code_argv(record.job_id)):
            done = await asyncio.to_thread(commands.run, argv, timeout=30, check=False)
            exit_code = self.dialect.parse_exit_code(done.stdout)
            nodes = self.dialect.parse_end_nodes(done.stdout)  # of a job that ran between polls
        record = self.fleet.records[name]
        log = self.error_log(record)
        text = tail(log, 5000)  # read once: its tail is shown, its errors are named
        storm = storm_lines(text)  # workers that connected, then died again and again
        end = end_of(record.state, exit_code, bool(storm))
        shown = not record.fully_started or storm  # a job whose second GPU's worker failed too
        job = self.fleet.apply(Ended(name, end, exit_code, (
            "\n".join(text.splitlines()[-self.tail_lines:]) or "(empty)") if shown else "", nodes))
        self._report(self.fleet.records[name], log, text, storm, record.retiring)
        record = self.fleet.records[name]
        ran = time.monotonic() - (record.started or time.monotonic())
        # a host whose network check failed is excluded now: its replacement runs elsewhere
        # (the first such host: a second one failing as well reads as the configuration)
        new = self.fleet.exclusions.note(exception_lines(text, 20), record.nodes,
                                         job=f"job {name} (id {record.job_id})")
        elsewhere = bool(new) and len(self.fleet.exclusions.hosts()) == len(new) == 1
        if record.state == "failed" and not record.fully_started and not record.connected \
                and ran < AT_ONCE and record.exit_code not in (None, 0) and not elsewhere:
            self.failed_at_once = True
        if job is not None:
            await job.close()
        self._replace_ended()

    async def _requeued(self, name: str, seen: Seen) -> None:
        """The scheduler put job ``name`` back in its queue: its workers are gone."""
        record = self.fleet.records[name]
        reason = seen.reason if seen.reason not in ("", "None") else "none given"
        what = (f"job {name} (id {record.job_id}) was put back in the queue by the "
                f"scheduler after it ran (its node failed or it was preempted; reason: {reason})")
        lost = "tasks and data held only by its workers are recomputed elsewhere"
        if self.keep_requeued:  # asked for: it keeps its place, its workers come back with it
            self._event(f"{what}; requeue=True: its workers start again when it runs; {lost}")
            self.fleet.apply(Requeued(name, keep=True))
            return
        self._event(f"{what}: cancelled and replaced now, not left waiting; {lost}")
        await self._cancel_and_replace(name)

    async def _cancel_and_replace(self, name: str) -> None:
        job = self.fleet.apply(Requeued(name))  # out of the spec first: capacity counted once
        if job is not None:
            await cancel_together(self.dialect, [job])
        self._replace_ended()

    def _on_excluded_host(self, name: str, seen: Seen) -> bool:
        """Job ``name`` started on a host the cluster excludes, where the scheduler cannot
        be told to keep it off (PBS): cancelled before its workers connect, and counted as
        a failed start, so that a scheduler choosing that host again and again is bounded by
        ``max_failed_jobs``."""
        record = self.fleet.records[name]
        hosts = set(seen.nodes) & set(self.fleet.exclusions.hosts())
        if self.dialect.excludes_hosts or seen.state != "running" or not hosts or record.connected:
            return False
        report = (f"job {name} (id {record.job_id}) started on excluded host(s) "
                  f"{', '.join(sorted(hosts))} ({self.dialect.name} has no request that keeps a job "
                  "off a host): cancelled before its workers start (a failed start: max_failed_jobs)")
        self.failures.append(report)
        logger.warning("%s", report)
        return True

    async def _watch_heartbeats(self) -> None:
        """Say once per job and host that its workers' heartbeats stopped, and why where
        its log says (a link down: :mod:`hpcgpu.worker.linkwatch`)."""
        source = self.scheduler()  # a scheduler apart: a coroutine of its workers' infos
        ages = heartbeat_ages(await source if inspect.isawaitable(source) else source)
        silent = silent_hosts(ages, self.fleet.job_key, silent_after(len(ages)))
        self._silent &= set(silent)  # heard again: said again if it goes quiet again
        for (name, host), (workers, age) in silent.items():
            record = self.fleet.records.get(name)
            if record is None or record.ended or (name, host) in self._silent:
                continue
            self._silent.add((name, host))
            index = {w[len(name) + 1:].split("-")[0] for w in workers}
            nodes = tuple(n for i, n in enumerate(record.nodes) if str(i) in index)
            link = link_line(tail(self.error_log(record), 5000))
            self._event(silence_message(name, record.job_id, host, nodes, workers, age, link))

    def _event(self, message: str) -> None:
        self.events.append(message)
        logger.warning("%s", message)

    def _report(self, record: JobRecord, log: str, text: str, storm: list[str],
                retiring: bool) -> None:
        """Say how job ``record`` ended (``text``: its error log; ``retiring``: it was)."""
        if not record.fully_started or storm:
            report = failure_report(
                record.info(), log, storm or exception_lines(text),
                *(["ended: its workers were restarted again and again"] * bool(storm)))
            if record.reason:
                report += f"\nthe scheduler says: {record.reason}"
            self.failures.append(report)
            logger.error("%s", report)
        elif retiring:
            logger.info("job %s (%s) ended near its walltime: %s", record.name, record.job_id,
                        record.state)
        else:
            self._event(f"job {record.name} (id {record.job_id}) ended while its workers were "
                        f"connected: state {record.state}, exit code {record.exit_code}; tasks "
                        "and data held only by its workers are recomputed elsewhere")

    def error_log(self, record: JobRecord) -> str:
        """The file its directives send the job's standard error to."""
        setup = self.fleet.job_pool(record.name).setup
        return kind_of(setup.shape).error_log(self.dialect, setup, record.name, record.job_id)

    def _replace_ended(self) -> None:
        missing = self.fleet.missing()
        if max(missing.values()) <= 0 or not self.running():
            return
        if self.gave_up:
            why = (f"the last failed within {AT_ONCE:g} s of starting: a replacement would fail "
                   "the same way" if self.failed_at_once else f"max_failed_jobs={self.max_failed_jobs}")
            logger.error(
                "%d job(s) ended before their workers connected; not submitting more (%s). "
                "See cluster.failures and cluster.job_table().", len(self.failures), why)
            self.give_up()
            return
        for pool, count in missing.items():
            self.fleet.grow(count, pool)
        self._asked = True
        self.reconcile()
