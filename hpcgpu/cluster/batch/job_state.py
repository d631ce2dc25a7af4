"""A batch job's lifecycle in the cluster: its states and the transitions allowed between them.

:class:`JobState` is where a job is in its life; the scheduler's own word for it at the last
poll (``completing``, ``unknown``...) is kept beside it on the record and is what users see
while the job lives. :data:`TRANSITIONS` lists every move the cluster makes, keyed by the
state a job is in and what happened to it (an event's ``label``). A move not listed is a bug
in the cluster: with ``hpcgpu.cluster.strict-job-states`` set (the test suite sets it) it
raises :class:`JobStateError`; otherwise a warning names the job and the cluster goes on, the
job keeping its state (a state-machine bug never stops a user's cluster).
"""

from __future__ import annotations

import enum
import logging

from hpcgpu.system import config

__all__ = ["JobState", "JobStateError", "LIVE", "TRANSITIONS", "move", "shown_state"]

logger = logging.getLogger("hpcgpu.cluster")


class JobState(str, enum.Enum):
    """Where a job of the cluster is in its life.

    ``submitted``: its entry made, its submit command under way (no job id yet);
    ``pending``: in the queue, never seen running; ``running``: seen running, or its workers
    connected; ``requeued``: put back in the queue after it ran, kept (``requeue=True``);
    ``retiring``: near its walltime, replaced already, left to end by itself; ``ended``,
    ``cancelled``, ``failed``: over (completed; cancelled, by the cluster or not; failed to
    submit, exited non-zero or its workers died again and again).

    >>> JobState.RETIRING.terminal, JobState.FAILED.terminal
    (False, True)
    """

    SUBMITTED = "submitted"
    PENDING = "pending"
    RUNNING = "running"
    REQUEUED = "requeued"
    RETIRING = "retiring"
    ENDED = "ended"
    CANCELLED = "cancelled"
    FAILED = "failed"

    @property
    def terminal(self) -> bool:
        """Over: holds nothing, runs nothing, never moves again."""
        return self in (JobState.ENDED, JobState.CANCELLED, JobState.FAILED)

    @property
    def word(self) -> str:
        """The state's word in the job table once the job is over (``ended`` is ``completed``,
        as the schedulers say)."""
        return "completed" if self is JobState.ENDED else self.value


S = JobState
#: The states of a job that lives (has or may get a job id and workers).
LIVE = (S.PENDING, S.RUNNING, S.REQUEUED, S.RETIRING)

#: (state, what happened) -> the next state. What happened is an event's label
#: (:mod:`hpcgpu.cluster.batch.job_events`).
TRANSITIONS: dict[tuple[JobState, str], JobState] = {
    (S.SUBMITTED, "submitted"): S.PENDING,
    # its workers connected before its submit command returned (a fast job of an array)
    (S.RUNNING, "submitted"): S.RUNNING,
    (S.SUBMITTED, "submit failed"): S.FAILED,
    **{(s, "seen"): s for s in LIVE},  # a poll's answer other than running: no move
    (S.PENDING, "seen running"): S.RUNNING,
    (S.RUNNING, "seen running"): S.RUNNING,
    (S.REQUEUED, "seen running"): S.RUNNING,
    (S.RETIRING, "seen running"): S.RETIRING,
    **{(s, "connected"): S.RUNNING for s in (S.SUBMITTED, S.PENDING, S.REQUEUED, S.RUNNING)},
    (S.RETIRING, "connected"): S.RETIRING,
    (S.RUNNING, "requeued"): S.REQUEUED,
    (S.RETIRING, "requeued"): S.RETIRING,  # replaced already: it stays out of the spec
    (S.RUNNING, "requeued, cancelled"): S.CANCELLED,
    (S.RETIRING, "requeued, cancelled"): S.CANCELLED,
    (S.RUNNING, "walltime near"): S.RETIRING,
    (S.RETIRING, "retired now"): S.RUNNING,  # scale down asked for it: cancelled, not left
    **{(s, end.value): end for s in LIVE for end in (S.ENDED, S.CANCELLED, S.FAILED)},
}


class JobStateError(RuntimeError):
    """A move :data:`TRANSITIONS` does not allow (raised with strict job states only)."""


def move(name: str, job_id: str | None, state: JobState, label: str) -> JobState:
    """The state after ``label`` happened to job ``name`` in ``state``.

    A move that is not allowed raises :class:`JobStateError` with strict job states
    (``hpcgpu.cluster.strict-job-states``); otherwise it logs a warning with the job's name
    and id, and the job keeps ``state``.

    >>> move("c-0", "41", JobState.PENDING, "seen running")
    <JobState.RUNNING: 'running'>
    >>> import dask
    >>> with dask.config.set({"hpcgpu.cluster.strict-job-states": True}):
    ...     move("c-0", "41", JobState.ENDED, "walltime near")
    Traceback (most recent call last):
    ...
    hpcgpu.cluster.batch.job_state.JobStateError: job c-0 (id 41): 'walltime near' is not allowed in state 'ended'
    """
    after = TRANSITIONS.get((state, label))
    if after is not None:
        return after
    message = f"job {name} (id {job_id}): {label!r} is not allowed in state {state.value!r}"
    if config.get("cluster.strict-job-states", False):
        raise JobStateError(message)
    logger.warning("%s; the job keeps its state (a bug in hpcgpu: please report it)", message)
    return state


def shown_state(state: JobState, reported: str) -> str:
    """A job's state in the job table: its scheduler's word while it lives (``retiring`` for a
    retiring job that runs), the end's word once over.

    >>> shown_state(JobState.RETIRING, "running"), shown_state(JobState.RETIRING, "completing")
    ('retiring', 'completing')
    >>> shown_state(JobState.ENDED, "running")
    'completed'
    """
    if state.terminal:
        return state.word
    return "retiring" if state is JobState.RETIRING and reported == "running" else reported
