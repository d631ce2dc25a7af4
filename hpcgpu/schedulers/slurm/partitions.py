"""What the nodes of a SLURM partition have (``sinfo``), for the check of a job shape
against them before submitting (:func:`hpcgpu.jobspec.queues.check_queue`, for every scheduler),
and every partition for the alternatives a refusal names.

Where ``sinfo`` cannot answer, that check warns once and changes nothing: the scheduler's
own answer stands. A partition sinfo does not list, even by its name, is refused.
"""

from __future__ import annotations

from hpcgpu.jobspec.queues.offer import (PartitionNode, QueryUnavailable, QueueOffer, alternatives_text,
                                         cpu_shape_problem, query, shape_problem)
from hpcgpu.jobspec.resources import GPUJobShape

__all__ = ["PartitionNode", "parse_sinfo", "sinfo_partitions", "slurm_partition_nodes",
           "with_named", "slurm_offer", "slurm_offers", "shape_problem", "check_cpu_partition"]

#: sinfo's one line per node and partition: name, CPUs, memory (MB), GRES, partition
SINFO_FORMAT = "%N|%c|%m|%G|%P"


def _listing(*options: str) -> str:
    """``sinfo``'s lines (:data:`SINFO_FORMAT`), with ``options``; :class:`QueryUnavailable`
    where sinfo cannot answer."""
    argv = ["sinfo", "--noheader", "--Node", f"--format={SINFO_FORMAT}", *options]
    return query(argv, empty=True, shown=3).stdout


def _gres_gpus(gres: str) -> tuple[tuple[str, int], ...]:
    """``gpu:h100:4(S:0-1),gpu:a100:2`` -> ``(("h100", 4), ("a100", 2))``."""
    found = []
    for item in gres.split(","):
        parts = item.split("(")[0].split(":")
        if parts[0] != "gpu" or len(parts) < 2 or not parts[-1].isdigit():
            continue
        found.append((parts[1] if len(parts) == 3 else "", int(parts[-1])))
    return tuple(found)


def parse_sinfo(text: str, partition: str | None = None) -> list[PartitionNode]:
    """Nodes of ``partition`` (the default one, marked ``*``, where None) from
    ``sinfo --noheader --Node --format='%N|%c|%m|%G|%P'``.

    Examples
    --------
    >>> text = "node1|32|262144|gpu:h100:4|debug*\\nnode1|32|262144|gpu:h100:4|gpu\\n"
    >>> parse_sinfo(text, "gpu")
    [PartitionNode(name='node1', cpus=32, memory=274877906944, gpus=(('h100', 4),), slots=0)]
    >>> parse_sinfo("node9|64|512000|(null)|cpu*\\n")
    [PartitionNode(name='node9', cpus=64, memory=536870912000, gpus=(), slots=0)]
    >>> parse_sinfo(text, "nosuch")
    []
    """
    nodes: dict[str, PartitionNode] = {}
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 5 or not fields[1].rstrip("+").isdigit():
            continue
        name, cpus, memory, gres, part = fields
        if (part.rstrip("*") != partition) if partition else not part.endswith("*"):
            continue
        memory = memory.rstrip("+")
        nodes[name] = PartitionNode(name, int(cpus.rstrip("+")),
                                    int(memory) * 2**20 if memory.isdigit() else 0,
                                    _gres_gpus(gres))
    return list(nodes.values())


def slurm_partition_nodes(partition: str | None) -> list[PartitionNode]:
    """The partition's nodes (the default partition's when None).

    Raises :class:`QueryUnavailable` when ``sinfo`` cannot answer."""
    return parse_sinfo(with_named(_listing(), partition), partition)


def with_named(text: str, partition: str | None) -> str:
    """``sinfo``'s lines (``text``) with those of ``partition`` where sinfo left it out: a
    partition configured ``Hidden=YES`` is listed to a user other than root only when named
    (``--partition``; ``--all`` would also list partitions the user may not use)."""
    if not partition or not text.strip() or partition in sinfo_partitions(text):
        return text
    try:
        return text + _listing(f"--partition={partition}")
    except QueryUnavailable:
        return text


def slurm_offer(shape: GPUJobShape, dialect: object = None) -> QueueOffer:
    """What the partition of ``shape.queue`` offers; a refusal where sinfo does not list it,
    even by its name (sbatch would take the job script and refuse only when a job is
    submitted)."""
    text = with_named(_listing(), shape.queue)
    nodes = tuple(parse_sinfo(text, shape.queue))
    if shape.queue and not nodes and text.strip():
        return QueueOffer("partition", shape.queue, refusal=(
            f"queue={shape.queue!r} is not a partition of this SLURM cluster (sinfo lists "
            "them)"))
    return QueueOffer("partition", shape.queue, nodes)


def sinfo_partitions(text: str) -> list[str]:
    r"""The partitions in ``sinfo`` lines (see :func:`parse_sinfo`), the default one first,
    then by name (sinfo's order of a node's partitions differs between runs of slurmctld).

    >>> sinfo_partitions("n1|32|1024|(null)|hidden\nn1|32|1024|(null)|gpu\nn1|32|1024|(null)|debug*\n")
    ['debug', 'gpu', 'hidden']
    """
    names = [line.split("|")[-1].strip() for line in text.splitlines() if line.count("|") == 4]
    names = sorted(dict.fromkeys(names), key=lambda n: (not n.endswith("*"), n))
    return list(dict.fromkeys(n.rstrip("*") for n in names))


def check_cpu_partition(queue: str | None, cores: int, memory: int) -> None:
    """The partition check for a CPU job (where ``sinfo`` cannot answer, SLURM's own check
    stands): a partition sinfo does not list is refused, naming those whose nodes can run
    the job."""
    try:
        listed = _listing()
    except QueryUnavailable:
        return
    offers = {name: QueueOffer("partition", name, tuple(parse_sinfo(listed, name)))
              for name in sinfo_partitions(listed)}
    text = with_named(listed, queue)
    if queue and queue not in sinfo_partitions(text) and offers:
        fits = [n for n, offer in offers.items() if not cpu_shape_problem(cores, memory, offer)]
        raise ValueError(f"queue={queue!r} is not a partition of this SLURM cluster (sinfo "
                         f"lists them); {alternatives_text('partition', fits)}")
    offer = QueueOffer("partition", queue, tuple(parse_sinfo(text, queue)))
    problem = cpu_shape_problem(cores, memory, offer)
    if problem:
        raise ValueError(problem)


def slurm_offers(shape: GPUJobShape, dialect: object = None) -> list[QueueOffer]:
    """Every partition, from one ``sinfo`` (the default partition first)."""
    text = _listing()
    return [QueueOffer("partition", name, tuple(parse_sinfo(text, name)))
            for name in sinfo_partitions(text)]


#: What :meth:`~hpcgpu.schedulers.base.Scheduler.queue_offer` and ``queue_offers`` call.
offer, offers = slurm_offer, slurm_offers
