"""What happens to a job, as values: the monitor, the walltime planner and the submitter make
these; :meth:`JobFleet.apply <hpcgpu.cluster.batch.fleet.JobFleet.apply>` applies them.

Each event names its job and says, in :meth:`change`, its label (the key of
:data:`~hpcgpu.cluster.batch.job_state.TRANSITIONS`) and the record's fields it sets.
:func:`advance` is the one function that turns a record and an event into the next record
(records are frozen); the fleet adds what an event does to the spec and to the started jobs.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Any

from hpcgpu.cluster.batch.job_state import JobState, move
from hpcgpu.cluster.batch.job_table import JobRecord

__all__ = ["Cancelling", "Connected", "Ended", "Requeued", "RetireNow", "Retiring", "Seen",
           "SubmitFailed", "Submitted", "advance", "end_of"]

_QUIET = ("", "None")  # SLURM's reason when it has none


@dataclass(frozen=True)
class Submitted:
    """Its submit command returned ``job`` (with its id); the job is cancelled at exit."""

    name: str
    job: Any = field(compare=False)

    def change(self, record: JobRecord) -> tuple[str | None, dict]:
        state = "running" if record.phase is JobState.RUNNING else "pending"
        return "submitted", {"job_id": self.job.job_id, "state": state}


@dataclass(frozen=True)
class SubmitFailed:
    """Its submit command failed (``error``: why): it leaves the spec."""

    name: str
    error: str = ""

    def change(self, record: JobRecord) -> tuple[str | None, dict]:
        return "submit failed", {"state": "failed"}


@dataclass(frozen=True)
class Seen:
    """A poll's answer: the scheduler's ``state`` word, nodes, exit code and reason, at ``at``
    (monotonic seconds). Its walltime starts when first seen running, again after a requeue."""

    name: str
    state: str
    nodes: tuple[str, ...] = ()
    exit_code: int | None = None
    reason: str = ""
    at: float = field(default_factory=time.monotonic)

    @property
    def finished(self) -> bool:
        return self.state in ("completed", "failed", "cancelled")

    def change(self, record: JobRecord) -> tuple[str | None, dict]:
        started = record.started
        if self.state == "running" and started is None:
            started = self.at
        elif self.state == "pending":
            started = None
        return ("seen running" if self.state == "running" else "seen"), {
            "state": self.state, "nodes": self.nodes or record.nodes, "exit_code": self.exit_code,
            "reason": record.reason if self.reason in _QUIET else self.reason, "started": started}

    @classmethod
    def of(cls, record: JobRecord, status: Any, now: float, gone_after: float) -> "Seen | None":
        """What a poll saw of ``record``'s job: its ``status`` (a ``JobStatus``), or, when
        the scheduler no longer lists it ``gone_after`` seconds after its submission, its end
        (``cancelled`` if the cluster cancelled it, else ``completed``); None: nothing yet.

        >>> Seen.of(JobRecord("c-0", 1, job_id="4", submitted=0.0), None, 10.0, 4.0).state
        'completed'
        """
        if status is not None:
            return cls(record.name, status.state, status.nodes, status.exit_code,
                       status.reason, now)
        if now - record.submitted > gone_after:
            return cls(record.name, "cancelled" if record.cancelled_by_us else "completed",
                       exit_code=record.exit_code, at=now)
        return None


@dataclass(frozen=True)
class Connected:
    """Names of its workers connected now (a job whose workers connect runs)."""

    name: str
    workers: frozenset = frozenset()

    def change(self, record: JobRecord) -> tuple[str | None, dict]:
        fields: dict = {"connected": self.workers,
                        "fully_started": record.fully_started or len(self.workers) >= record.expected}
        if self.workers and record.state in ("submitting", "pending") and not record.ended:
            return "connected", {**fields, "state": "running"}
        return None, fields


@dataclass(frozen=True)
class Requeued:
    """The scheduler put it back in its queue after it ran: kept (``keep``), or cancelled by
    the cluster and out of the spec."""

    name: str
    keep: bool = False

    def change(self, record: JobRecord) -> tuple[str | None, dict]:
        if self.keep:
            return "requeued", {}
        return "requeued, cancelled", {"state": "cancelled", "cancelled_by_us": True}


@dataclass(frozen=True)
class Retiring:
    """Near its walltime (``message`` says so): out of the spec, replaced, left to end."""

    name: str
    message: str = ""

    def change(self, record: JobRecord) -> tuple[str | None, dict]:
        return "walltime near", {}


@dataclass(frozen=True)
class RetireNow:
    """A retiring job that scale down takes: cancelled now, not left to end by itself."""

    name: str

    def change(self, record: JobRecord) -> tuple[str | None, dict]:
        return "retired now", {}


@dataclass(frozen=True)
class Cancelling:
    """The cluster cancels it: its end is no failure (no move)."""

    name: str

    def change(self, record: JobRecord) -> tuple[str | None, dict]:
        return None, {"cancelled_by_us": True}


@dataclass(frozen=True)
class Ended:
    """It is over, as ``state`` (ended, cancelled or failed); ``exit_code``, ``stderr_tail``
    and ``nodes`` (of a job no poll saw running) when known (None and empty keep the record's)."""

    name: str
    state: JobState = JobState.ENDED
    exit_code: int | None = None
    stderr_tail: str = ""
    nodes: tuple[str, ...] = ()

    def change(self, record: JobRecord) -> tuple[str | None, dict]:
        return self.state.value, {
            "state": self.state.word, "stderr_tail": self.stderr_tail or record.stderr_tail,
            "exit_code": record.exit_code if self.exit_code is None else self.exit_code,
            "nodes": record.nodes or self.nodes}


def end_of(reported: str, exit_code: int | None, storm: bool) -> JobState:
    """How a job ended: the scheduler's last word ``reported`` (``completed``, ``failed`` or
    ``cancelled``), its exit code, and whether its workers died again and again (``storm``).

    >>> end_of("completed", 0, False), end_of("completed", 3, False), end_of("cancelled", 1, False)
    (<JobState.ENDED: 'ended'>, <JobState.FAILED: 'failed'>, <JobState.CANCELLED: 'cancelled'>)
    >>> end_of("cancelled", None, True)
    <JobState.FAILED: 'failed'>
    """
    if storm or reported == "failed" or (exit_code not in (None, 0) and reported == "completed"):
        return JobState.FAILED
    return JobState.CANCELLED if reported == "cancelled" else JobState.ENDED


def advance(record: JobRecord, event: Any) -> JobRecord:
    """``record`` after ``event``: its fields set, its state moved as
    :func:`~hpcgpu.cluster.batch.job_state.move` allows (a move not allowed keeps the state).

    >>> record = JobRecord("c-0", 2, job_id="7", phase=JobState.PENDING, state="pending")
    >>> after = advance(record, Seen("c-0", "running", ("n1",), at=5.0))
    >>> after.phase, after.state, after.nodes, after.started
    (<JobState.RUNNING: 'running'>, 'running', ('n1',), 5.0)
    """
    label, fields = event.change(record)
    if label is not None:
        fields["phase"] = move(record.name, record.job_id, record.phase, label)
    return replace(record, **fields)
