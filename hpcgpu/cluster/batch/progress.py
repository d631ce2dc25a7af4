"""``wait_for_workers``: wait until enough workers connect, showing the jobs' states.

The wait fails early, with the failure reports, when jobs ended before their workers
connected and the spec no longer plans enough workers; on timeout it shows the job table.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Any, Awaitable, Callable

from hpcgpu.cluster.batch.job_table import JobInfo, format_table, table_columns, table_rows
from hpcgpu.worker.reach import NetworkCheckError

__all__ = ["wait_for_workers"]


async def wait_for_workers(wanted: int, timeout: float | None, *,
                           workers: Callable[[], Awaitable[dict]], fleet: Any,
                           failures: list[str], pool: str | None = None,
                           reach: Any = None) -> None:
    """Until ``wanted`` workers (of ``pool``, or of every pool) run.

    ``workers()``: the scheduler's workers now (address -> info), the fleet's records
    refreshed; ``fleet``: the jobs planned and their table; ``failures``: the reports of
    jobs that ended before their workers connected (the wait then fails early, once the
    spec no longer plans enough workers); ``reach``: the workers' ports as this host reaches
    them (:class:`~hpcgpu.cluster.batch.reachback.ReachBack`): a worker counts once it answered,
    and one that cannot answer fails the wait.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    show = _Progress(wanted)
    try:
        while True:
            if reach is not None and reach.problems:
                raise NetworkCheckError(
                    f"{len(reach.problems)} worker(s) connected but cannot be reached from this "
                    "host:\n" + "\n".join(reach.problems))
            count = sum(w.get("status") == "running" and (reach is None or reach.answered(a))
                        for a, w in (await workers()).items()
                        if pool is None or fleet.worker_pool(str(w["name"])) == pool)
            show.update(count, fleet.table())
            if count >= wanted:
                return
            planned = sum(fleet.job_pool(job).workers_per_job for job in fleet.spec
                          if pool is None or fleet.job_pool(job).name == pool)
            if failures and (planned < wanted or count == 0 and _network_only(failures, fleet)):
                raise RuntimeError(
                    f"{wanted} workers cannot connect: jobs ended before their "
                    "workers connected:\n" + "\n".join(failures)
                )
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(
                    f"{count} of {wanted} workers connected after {timeout} s; "
                    f"jobs:\n{format_table(fleet.table())}"
                )
            await asyncio.sleep(0.2)
    finally:
        show.close()


def _network_only(failures: list[str], fleet: Any = None) -> bool:
    """Every failed job's workers found the network unusable from their host (their interface
    missing, the scheduler unreachable): replacements would meet the same, so waiting for them
    only delays the error (hpcgpu.worker.reach). Except after one such failure whose host the
    cluster now excludes: its replacement runs on another host (a second host failing reads
    as the configuration, hpcgpu.cluster.batch.exclusions)."""
    excluded = getattr(fleet, "exclusions", None)
    if len(failures) == 1 and excluded is not None and excluded.hosts():
        return False
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
    hpcgpu: 0/2 workers connected; jobs none yet (0 s)
    hpcgpu: 0/2 workers connected; jobs none yet (31 s)
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
        states = ", ".join(f"{j.name}:{j.state}" for j in jobs) or "none yet"  # scale() submits soon
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
