"""Which queues (partitions) exist and can run a job shape: the alternatives a refusal names.

Each scheduler lists its queues (``Scheduler.queue_offers``: SLURM reads every partition from
one ``sinfo``; PBS every queue from one ``qstat -Qf -F json`` and one ``pbsnodes``; Grid Engine
(``qconf -sql``) and LSF (``bqueues -w``) list their queues and each is asked as the check asks
it). Each queue is then judged by the same :func:`~hpcgpu.jobspec.queues.offer.shape_problem`
as the one asked for.
"""

from __future__ import annotations

from dataclasses import replace

from hpcgpu.jobspec.queues.offer import QueryUnavailable, alternatives_text, shape_problem
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.schedulers.registry import get_scheduler, scheduler_names

__all__ = ["MAX_QUEUES_ASKED", "fitting_queues", "alternatives_text"]

#: Grid Engine and LSF ask each queue apart (qconf -sq/-se, bqueues -l/lshosts): at most this many
MAX_QUEUES_ASKED = 16


def fitting_queues(scheduler: str, shape: GPUJobShape, dialect: object = None) -> list[str] | None:
    """The queues of ``scheduler`` that exist and can run ``shape`` (its ``queue`` aside);
    None where the scheduler cannot list them.

    Examples
    --------
    >>> fitting_queues("flux", GPUJobShape.create()) is None
    True
    """
    if scheduler not in scheduler_names():
        return None
    try:
        offers = get_scheduler(scheduler).queue_offers(shape, dialect)
    except (QueryUnavailable, ValueError, KeyError, TypeError):
        return None
    if offers is None:
        return None
    fits = []
    for offer in offers:
        # a queue whose nodes are unknown is not offered: it may not fit either
        if offer.nodes and not offer.refusal and shape_problem(
                replace(shape, queue=offer.name), offer) is None:
            fits.append(offer.name)
    return fits
