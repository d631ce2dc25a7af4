"""Before submitting: does the job shape fit what the queue's nodes offer?

One query per scheduler (``Scheduler.queue_offer``) reads what the nodes behind the queue have into a
:class:`~hpcgpu.jobspec.queues.offer.QueueOffer` (SLURM ``sinfo``; Grid Engine ``qconf``; PBS Pro
``qstat -Qf``/``pbsnodes``; LSF ``bqueues``/``lshosts``), and one check
(:func:`~hpcgpu.jobspec.queues.offer.shape_problem`) refuses what cannot run there, naming the field
and the fix. Where the scheduler cannot be asked (no command, a restricted ``qconf``, an
error, an answer not understood), :func:`check_queue` warns once and lets the job go: the
scheduler's own answer stands.
"""

from __future__ import annotations

import logging
import warnings

from hpcgpu.jobspec.queues.listing import alternatives_text, fitting_queues
from hpcgpu.jobspec.queues.offer import PartitionNode, QueryUnavailable, QueueOffer, shape_problem
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.schedulers.registry import get_scheduler, scheduler_names

__all__ = ["QueueCheckWarning", "check_queue", "queue_offer", "PartitionNode",
           "QueueOffer", "QueryUnavailable", "shape_problem"]

logger = logging.getLogger(__name__)


class QueueCheckWarning(UserWarning):
    """The queue's nodes could not be asked: the request is submitted unchecked."""


_warned: set[tuple[str, str]] = set()


def queue_offer(scheduler: str, shape: GPUJobShape, dialect: object = None) -> QueueOffer | None:
    """What ``shape.queue`` offers on ``scheduler``; None (warned once per scheduler and
    queue) where it cannot be asked."""
    if scheduler not in scheduler_names():
        return None
    try:  # None: this scheduler cannot be asked
        return get_scheduler(scheduler).queue_offer(shape, dialect)
    except (QueryUnavailable, ValueError, KeyError, TypeError) as exc:
        key = (scheduler, shape.queue or "")
        if key not in _warned:
            _warned.add(key)
            message = (f"could not ask {scheduler} what the nodes of "
                       f"{'queue ' + repr(shape.queue) if shape.queue else 'its queues'} offer "
                       f"({exc}): the request is submitted unchecked, and the scheduler's own "
                       "answer stands")
            warnings.warn(message, QueueCheckWarning, stacklevel=3)
            logger.warning(message)
        return None


def check_queue(scheduler: str, shape: GPUJobShape, dialect: object = None) -> None:
    """Raise ``ValueError`` (the field, what the nodes have, the fix, and the queues that
    exist and can run ``shape`` where the scheduler lists them) before anything is submitted
    where ``shape`` cannot run in its queue (or the queue does not exist); nothing where it
    may, or where the scheduler cannot be asked."""
    offer = queue_offer(scheduler, shape, dialect)
    problem = shape_problem(shape, offer) if offer is not None else None
    if problem:
        # the queues that could run it, where the scheduler can list them: the fix at hand
        more = alternatives_text(offer.kind, fitting_queues(scheduler, shape, dialect))
        raise ValueError(f"{problem}; {more}" if more else problem)
