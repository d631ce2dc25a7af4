"""The cluster's table of its batch jobs: state, nodes, connected workers, failures.

:class:`JobInfo` is the frozen row users see; :class:`JobRecord` is the cluster's own
bookkeeping behind it, frozen too: the fleet makes each next record from an event. Rendering
is pure.
"""

from __future__ import annotations

import html
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from hpcgpu.cluster.batch.job_state import JobState, shown_state

__all__ = ["JobInfo", "JobRecord", "JobTable", "format_table", "html_table", "failure_report",
           "tail"]

COLUMNS = ("job", "job id", "state", "nodes", "workers", "exit code")


@dataclass(frozen=True)
class JobInfo:
    """One job of a cluster, as last polled.

    Attributes
    ----------
    name : str
        The job's name in the cluster (the prefix of its workers' names).
    job_id : str or None
        The batch scheduler's id (None until submitted).
    state : str
        ``submitting``, ``pending``, ``running``, ``retiring`` (near its walltime, replaced
        already, its workers moving their data away), ``completing``, ``completed``,
        ``failed``, ``cancelled`` or ``unknown``.
    nodes : tuple of str
    workers : tuple of str
        Names of its workers connected now.
    expected : int
        Workers (GPUs) the job starts.
    exit_code : int or None
    stderr_tail : str
        The last lines of its stderr file, for a job that ended before its workers connected.
    pool : str or None
        Its pool, in a cluster with ``pools=`` (the table then has a pool column).
    excluded : tuple of str
        Hosts it was submitted to stay off, where a worker had failed the network check
        (the table then has an ``excluding`` column; :mod:`hpcgpu.cluster.batch.exclusions`).
    """

    name: str
    job_id: str | None
    state: str
    nodes: tuple[str, ...]
    workers: tuple[str, ...]
    expected: int
    exit_code: int | None = None
    stderr_tail: str = ""
    pool: str | None = None
    excluded: tuple[str, ...] = ()

    @property
    def failed_to_start(self) -> bool:
        """Ended without any of its workers ever connecting."""
        return bool(self.stderr_tail) or self.state == "failed" and not self.workers


@dataclass(frozen=True)
class JobRecord:
    """The cluster's bookkeeping for one job, as of its last event.

    Frozen: :class:`~hpcgpu.cluster.batch.fleet.JobFleet` alone makes the next one, from an event
    (:func:`hpcgpu.cluster.batch.job_events.advance`). ``phase`` is where the job is in its life;
    ``state`` the scheduler's word at the last poll (``running`` once a worker connected),
    or the end's once over.
    """

    name: str
    expected: int
    job_id: str | None = None
    phase: JobState = JobState.SUBMITTED
    state: str = "submitting"
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    stderr_tail: str = ""
    connected: frozenset = frozenset()
    #: all its workers were connected at once at some point (else an end is a failure to start)
    fully_started: bool = False
    cancelled_by_us: bool = False
    submitted: float = field(default_factory=time.monotonic)
    started: float | None = None
    pool: str | None = None
    #: the scheduler's own words for its state at the last poll (PBS's comment, SLURM's reason)
    reason: str = ""
    #: hosts it was submitted to stay off
    excluded: tuple[str, ...] = ()

    @property
    def ended(self) -> bool:
        """Over: it will not run again."""
        return self.phase.terminal

    @property
    def retiring(self) -> bool:
        """Near its walltime, replaced already, left to end by itself."""
        return self.phase is JobState.RETIRING

    def info(self) -> JobInfo:
        """A frozen snapshot."""
        return JobInfo(self.name, self.job_id, shown_state(self.phase, self.state), self.nodes,
                       tuple(sorted(self.connected)), self.expected, self.exit_code,
                       self.stderr_tail, self.pool, self.excluded)


def tail(path: str | Path, lines: int = 20) -> str:
    """The last ``lines`` lines of a text file ("" when it does not exist).

    >>> import tempfile, os
    >>> with tempfile.NamedTemporaryFile("w", delete=False) as f:
    ...     _ = f.write("a\\nb\\nc\\n")
    >>> tail(f.name, 2)
    'b\\nc'
    >>> os.unlink(f.name)
    """
    try:
        with open(path, errors="replace") as file:
            return "\n".join(file.read().splitlines()[-lines:])
    except OSError:
        return ""


def table_rows(jobs: list[JobInfo]) -> list[tuple[str, ...]]:
    pools, excluding = _with_pools(jobs), any(j.excluded for j in jobs)
    return [
        (j.name, *((j.pool or "-",) if pools else ()), j.job_id or "-", j.state,
         ",".join(j.nodes) or "-", f"{len(j.workers)}/{j.expected}",
         "-" if j.exit_code is None else str(j.exit_code),
         *((",".join(j.excluded) or "-",) if excluding else ()))
        for j in jobs
    ]


def table_columns(jobs: list[JobInfo]) -> tuple[str, ...]:
    """:data:`COLUMNS`, with ``pool`` after ``job`` when the jobs belong to pools, and
    ``excluding`` last when a job was kept off hosts.

    >>> table_columns([JobInfo("c-cpu-1", "5", "running", (), (), 1, pool="cpu")])[:3]
    ('job', 'pool', 'job id')
    >>> table_columns([JobInfo("c-1", "5", "running", (), (), 1, excluded=("node2",))])[-1]
    'excluding'
    """
    columns = (COLUMNS[0], "pool", *COLUMNS[1:]) if _with_pools(jobs) else COLUMNS
    return columns + (("excluding",) if any(j.excluded for j in jobs) else ())


def _with_pools(jobs: list[JobInfo]) -> bool:
    return any(j.pool is not None for j in jobs)


def format_table(jobs: list[JobInfo]) -> str:
    """A plain-text table of jobs.

    >>> print(format_table([JobInfo("c-0", "17", "running", ("node1",), ("c-0-0-0",), 2)]))
    job  job id  state    nodes  workers  exit code
    c-0  17      running  node1  1/2      -
    >>> print(format_table([JobInfo("c-cpu-1", "18", "pending", (), (), 1, pool="cpu")]))
    job      pool  job id  state    nodes  workers  exit code
    c-cpu-1  cpu   18      pending  -      0/1      -
    """
    columns = table_columns(jobs)
    rows = [columns, *table_rows(jobs)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(columns))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows
    )


def html_table(jobs: list[JobInfo]) -> str:
    """The same table as HTML, for notebooks.

    >>> html_table([]).startswith("<table")
    True
    """
    head = "".join(f"<th>{c}</th>" for c in table_columns(jobs))
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
        for row in table_rows(jobs)
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


class JobTable(tuple):
    """The jobs of a cluster: a tuple of :class:`JobInfo` that shows itself as a table.

    It stays a sequence for code (``len``, indexing, iteration); ``repr`` is the plain-text
    table, notebooks get HTML, and rich a ``rich.table.Table``.

    >>> JobTable([JobInfo("c-0", "17", "pending", (), (), 4)])
    job  job id  state    nodes  workers  exit code
    c-0  17      pending  -      0/4      -
    >>> JobTable([])[:0] == ()
    True
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return format_table(list(self))

    def _repr_html_(self) -> str:
        return html_table(list(self))

    def __rich__(self):
        from rich.table import Table

        table = Table(*table_columns(list(self)))
        for row in table_rows(list(self)):
            table.add_row(*row)
        return table


def failure_report(job: JobInfo, error_log: str, errors: Sequence[str] = (),
                   what: str = "ended before its workers connected") -> str:
    """What a user needs to see about a job that ended before its workers connected.

    ``errors``: the first exception lines of the whole log (the workers' own words), shown
    when the last lines do not hold them (other tasks' shutdown output came after).

    >>> print(failure_report(JobInfo("c-0", "9", "failed", (), (), 4, 1, "srun: error: task 1"),
    ...                      "logs/hpcgpu-9.err", ["ImportError: no module named x"]))
    job c-0 (id 9) ended before its workers connected: state failed, exit code 1
    first errors in logs/hpcgpu-9.err:
        ImportError: no module named x
    last lines of logs/hpcgpu-9.err:
        srun: error: task 1
    """
    code = "unknown" if job.exit_code is None else str(job.exit_code)
    lines = [f"job {job.name} (id {job.job_id}) {what}: "
             f"state {job.state}, exit code {code}"]
    if any(e not in job.stderr_tail for e in errors):
        lines.append(f"first errors in {error_log}:")
        lines += ["    " + e for e in errors]
    if job.stderr_tail:
        lines.append(f"last lines of {error_log}:")
        lines += ["    " + line for line in job.stderr_tail.splitlines()]
    else:
        lines.append(f"{error_log} is empty or missing")
    return "\n".join(lines)
