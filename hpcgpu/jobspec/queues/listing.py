"""Which queues (partitions) exist and can run a job shape: the alternatives a refusal names.

One listing per scheduler: SLURM reads every partition from one ``sinfo``; PBS every queue
from one ``qstat -Qf -F json`` and one ``pbsnodes``; Grid Engine (``qconf -sql``) and LSF
(``bqueues -w``) list their queues and each is asked as the check asks it. Each queue is then
judged by the same :func:`~hpcgpu.jobspec.queues.offer.shape_problem` as the one asked for.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Callable

from hpcgpu.jobspec.queues.offer import QueryUnavailable, QueueOffer, alternatives_text, query, shape_problem
from hpcgpu.jobspec.resources import GPUJobShape

__all__ = ["MAX_QUEUES_ASKED", "fitting_queues", "slurm_offers", "pbs_offers", "sge_offers",
           "lsf_offers", "parse_bqueues_w", "alternatives_text"]

#: Grid Engine and LSF ask each queue apart (qconf -sq/-se, bqueues -l/lshosts): at most this many
MAX_QUEUES_ASKED = 16


def slurm_offers(shape: GPUJobShape, dialect: object = None) -> list[QueueOffer]:
    """Every partition, from one ``sinfo`` (the default partition first)."""
    from hpcgpu.jobspec.partition import SINFO_FORMAT, parse_sinfo, sinfo_partitions

    argv = ["sinfo", "--noheader", "--Node", f"--format={SINFO_FORMAT}"]
    text = query(argv, empty=True, shown=3).stdout
    return [QueueOffer("partition", name, tuple(parse_sinfo(text, name)))
            for name in sinfo_partitions(text)]


def pbs_offers(shape: GPUJobShape, dialect: object = None) -> list[QueueOffer]:
    """Every enabled execution or routing queue, from one ``qstat -Qf -F json`` and one
    ``pbsnodes -av -F json``."""
    from hpcgpu.jobspec.queues import pbs

    queues = pbs._load(query(["qstat", "-Qf", "-F", "json"], empty=True).stdout, "Queue")
    nodes = query(["pbsnodes", "-av", "-F", "json"], empty=True).stdout
    kind = getattr(dialect, "gpu_type_resource", "gpu_model")
    offers = []
    for name, info in queues.items():
        if str(info.get("enabled", "True")) == "False":
            continue
        routed = info.get("queue_type") == "Route"  # its jobs run on other queues' vnodes
        found = pbs.parse_pbsnodes(nodes, None if routed else name, kind)
        offers.append(QueueOffer("queue", name, tuple(found), **pbs._limits(info)))
    return offers


def sge_offers(shape: GPUJobShape, dialect: object = None) -> list[QueueOffer]:
    """Every cluster queue (``qconf -sql``), each asked as the check asks it."""
    from hpcgpu.jobspec.queues.sge import sge_offer

    names = query(["qconf", "-sql"]).stdout.split()[:MAX_QUEUES_ASKED]
    return [sge_offer(replace(shape, queue=name), dialect) for name in names]


def parse_bqueues_w(text: str) -> list[str]:
    r"""Queue names from ``bqueues -w`` (a ``QUEUE_NAME ... STATUS`` header, a row per
    queue); closed or inactive queues left out.

    >>> parse_bqueues_w("QUEUE_NAME PRIO STATUS MAX\ngpu 40 Open:Active -\n"
    ...                 "old 30 Closed:Inact -\nnormal 30 Open:Active -\n")
    ['gpu', 'normal']
    """
    names = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) >= 3 and fields[0] != "QUEUE_NAME" and fields[2] == "Open:Active":
            names.append(fields[0])
    return names


def lsf_offers(shape: GPUJobShape, dialect: object = None) -> list[QueueOffer]:
    """Every open queue (``bqueues -w``), each asked as the check asks it."""
    from hpcgpu.jobspec.queues.lsf import lsf_offer

    names = parse_bqueues_w(query(["bqueues", "-w"]).stdout)[:MAX_QUEUES_ASKED]
    return [lsf_offer(replace(shape, queue=name), dialect) for name in names]


#: scheduler name -> ``offers(shape, dialect) -> [QueueOffer]`` (raises QueryUnavailable)
LISTINGS: dict[str, Callable[[GPUJobShape, object], list[QueueOffer]]] = {
    "slurm": slurm_offers, "pbs": pbs_offers, "sge": sge_offers, "lsf": lsf_offers,
}


def fitting_queues(scheduler: str, shape: GPUJobShape, dialect: object = None) -> list[str] | None:
    """The queues of ``scheduler`` that exist and can run ``shape`` (its ``queue`` aside);
    None where the scheduler cannot list them.

    Examples
    --------
    >>> fitting_queues("flux", GPUJobShape.create()) is None
    True
    """
    listing = LISTINGS.get(scheduler)
    if listing is None:
        return None
    try:
        offers = listing(shape, dialect)
    except (QueryUnavailable, ValueError, KeyError, TypeError):
        return None
    fits = []
    for offer in offers:
        # a queue whose nodes are unknown is not offered: it may not fit either
        if offer.nodes and not offer.refusal and shape_problem(
                replace(shape, queue=offer.name), offer) is None:
            fits.append(offer.name)
    return fits
