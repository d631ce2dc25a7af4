"""What the nodes behind a queue offer, and whether a job shape fits them.

One value (:class:`QueueOffer`) for every scheduler: SLURM's partitions (``sinfo``), Grid
Engine's cluster queues (``qconf``), PBS Pro's queues (``qstat -Qf``, ``pbsnodes``) and LSF's
queues (``bqueues``, ``lshosts``) are read into it by their own modules, and one function,
:func:`shape_problem`, says why a shape cannot run there, naming the field and the fix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.system import commands

__all__ = ["PartitionNode", "QueueOffer", "QueryUnavailable", "query", "shape_problem", "cpu_shape_problem",
           "gres_text", "alternatives_text"]


class QueryUnavailable(RuntimeError):
    """The scheduler could not be asked (no command, an error, an answer not understood)."""


def query(argv: list[str], *, empty: bool = False, answers: str | None = None,
          shown: int | None = None) -> commands.CommandResult:
    """``argv``'s result; :class:`QueryUnavailable` (the first ``shown`` words, its first line
    of output) when it fails, or says nothing unless ``empty``; an error whose words hold
    ``answers`` is an answer."""
    result = commands.run(argv, check=False, timeout=30)
    if answers and answers in result.stderr.lower():
        return result
    if result.returncode != 0 or not (empty or result.stdout.strip()):
        said = (result.stderr.strip() or result.stdout.strip() or "no output").splitlines()[0]
        raise QueryUnavailable(f"{' '.join(argv[:shown])} failed ({result.returncode}): {said}")
    return result


@dataclass(frozen=True)
class PartitionNode:
    """One node: its name, cores, memory (bytes) and GPUs by type (``""``: untyped).

    ``cpus`` or ``memory`` of 0 is unknown (not checked); ``slots`` is Grid Engine's slots of
    the queue on this host (0: not counted).
    """

    name: str
    cpus: int
    memory: int
    gpus: tuple[tuple[str, int], ...] = ()
    slots: int = 0

    @property
    def gpu_count(self) -> int:
        return sum(n for _, n in self.gpus)


def gres_text(node: PartitionNode) -> str:
    """SLURM's way of writing a node's GPUs: ``gpu:h100:4``."""
    return ",".join(f"gpu:{t}:{c}" if t else f"gpu:{c}" for t, c in node.gpus) or "no GPU"


@dataclass(frozen=True)
class QueueOffer:
    """What one queue (partition) offers a job.

    Parameters
    ----------
    kind : str
        What the scheduler calls it: ``partition`` (SLURM) or ``queue``.
    name : str or None
        Its name; None: the scheduler picks (the default partition, any queue).
    nodes : tuple of PartitionNode
        The nodes (hosts) a job of this queue can run on.
    refusal : str or None
        A definite no found while asking (the queue or the parallel environment does not exist).
    node_word : str
        ``node`` or ``host``, as the scheduler says it.
    gpu_text : callable
        How the scheduler writes a node's GPUs (``gpu:h100:4``, ``gpu=4``, ``ngpus=4``).
    max_gpus, max_nodes, max_memory : int or None
        The queue's limits on a whole job (PBS ``resources_max``); memory in bytes.
    max_memory_per_slot : int or None
        Grid Engine: the queue's ``h_vmem`` (one slot, one GPU worker).
    type_matches : callable or None
        ``type_matches(asked, node_type)``: whether a GPU of ``node_type`` is one of
        ``gpu_type=asked``; None: the scheduler is not asked for a type (not checked).
    """

    kind: str
    name: str | None
    nodes: tuple[PartitionNode, ...] = ()
    refusal: str | None = None
    node_word: str = "node"
    gpu_text: Callable[[PartitionNode], str] = gres_text
    max_gpus: int | None = None
    max_nodes: int | None = None
    max_memory: int | None = None
    max_memory_per_slot: int | None = None
    type_matches: Callable[[str, str], bool] | None = str.__eq__

    def gpus(self, node: PartitionNode, gpu_type: str | None) -> int:
        """GPUs of ``node`` that are of ``gpu_type`` (all where None or types are not asked)."""
        if not gpu_type or self.type_matches is None:
            return node.gpu_count
        return sum(n for t, n in node.gpus if self.type_matches(gpu_type, t))

    @property
    def where(self) -> str:
        if self.name:
            return f"{self.kind} {self.name!r}"
        return "the default partition" if self.kind == "partition" else f"any {self.kind}"

    def hosts(self, nodes: list[PartitionNode]) -> str:
        names = [n.name for n in nodes]
        return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def _gib(size: int) -> str:
    return f"{size / 2**30:.0f} GiB"


def _gpu_problem(shape: GPUJobShape, offer: QueueOffer) -> str | None:
    nodes, kind, where = list(offer.nodes), shape.gpu_type, offer.where
    if offer.type_matches is None:
        kind = None
    if kind and not any(offer.gpus(n, kind) for n in nodes):
        types = sorted({t for n in nodes for t, _ in n.gpus if t})
        if not types:
            return (f"gpu_type={kind!r}: the {offer.node_word}s of {where} do not say their GPU "
                    f"type: leave gpu_type unset, or use another {offer.kind}")
        return (f"gpu_type={kind!r}: the {offer.node_word}s of {where} have GPUs of type "
                f"{', '.join(types)}: use gpu_type={types[0]!r}, or another {offer.kind}")
    most = max(offer.gpus(n, kind) for n in nodes)
    if shape.gpus_per_node > most:
        best = [n for n in nodes if offer.gpus(n, kind) == most]
        return (f"gpus_per_node={shape.gpus_per_node} is more than the {most} GPUs a "
                f"{offer.node_word} of {where} has ({offer.gpu_text(best[0])} on "
                f"{offer.hosts(best)}): use gpus_per_node<={most} and more nodes, or another "
                f"{offer.kind} with larger {offer.node_word}s")
    return None


def _host_problem(shape: GPUJobShape, offer: QueueOffer) -> str | None:
    nodes, where, word = list(offer.nodes), offer.where, offer.node_word
    cpus = max(n.cpus for n in nodes)
    if cpus and shape.cpus_per_node > cpus:
        return (f"cpus_per_gpu={shape.cpus_per_gpu} x gpus_per_node={shape.gpus_per_node} = "
                f"{shape.cpus_per_node} CPUs is more than the {cpus} a {word} of {where} has: "
                f"use cpus_per_gpu<={max(1, cpus // shape.gpus_per_node)}")
    slots = max(n.slots for n in nodes)
    if slots and shape.gpus_per_node > slots:
        return (f"gpus_per_node={shape.gpus_per_node} needs {shape.gpus_per_node} slots (one per "
                f"GPU) but {where} has at most {slots} on a {word}: use gpus_per_node<={slots}")
    per_slot, limit = shape.gpu_memory, offer.max_memory_per_slot
    if per_slot and limit and per_slot > limit:
        return (f"memory_per_gpu={_gib(per_slot)} is more than the h_vmem={_gib(limit)} "
                f"{where} allows a slot (one GPU worker): ask for memory_per_gpu<="
                f"{limit // 2**30}GiB")
    memory, most = shape.node_memory, max(n.memory for n in nodes)
    if memory and most and memory > most:
        return (f"memory per node ({_gib(memory)}) is more than the {_gib(most)} a {word} of "
                f"{where} has: ask for memory_per_gpu<={most // shape.gpus_per_node // 2**30}GiB")
    return None


def _job_problem(shape: GPUJobShape, offer: QueueOffer) -> str | None:
    where, memory = offer.where, shape.node_memory
    fit = [n for n in offer.nodes if offer.gpus(n, shape.gpu_type) >= shape.gpus_per_node
           and n.cpus >= (shape.cpus_per_node if n.cpus else 0)
           and (not n.slots or n.slots >= shape.gpus_per_node)
           and (not memory or not n.memory or n.memory >= memory)]
    if shape.nodes > len(fit):
        return (f"nodes={shape.nodes} is more than the {len(fit)} {offer.node_word}(s) of {where} "
                f"that have {shape.gpus_per_node} GPU(s), {shape.cpus_per_node} CPUs and the "
                f"memory asked for: use nodes<={len(fit)}")
    if offer.max_gpus is not None and shape.total_gpus > offer.max_gpus:
        return (f"nodes={shape.nodes} x gpus_per_node={shape.gpus_per_node} = {shape.total_gpus} "
                f"GPUs is more than the {offer.max_gpus} {where} allows a job: use at most "
                f"{offer.max_gpus} GPUs per job (more jobs), or another {offer.kind}")
    if offer.max_nodes is not None and shape.nodes > offer.max_nodes:
        return (f"nodes={shape.nodes} is more than the {offer.max_nodes} {where} allows a job: "
                f"use nodes<={offer.max_nodes}, or another {offer.kind}")
    total = memory * shape.nodes if memory else 0
    if offer.max_memory is not None and total > offer.max_memory:
        return (f"memory of the job ({_gib(total)}) is more than the {_gib(offer.max_memory)} "
                f"{where} allows a job: ask for less memory_per_gpu or fewer GPUs per job")
    return None


def cpu_shape_problem(cores: int, memory: int, offer: QueueOffer) -> str | None:
    """Why a CPU pool's job (one node of ``cores`` cores and ``memory`` bytes) cannot run in
    ``offer``, or None when it fits or nothing is known.

    >>> offer = QueueOffer("partition", "debug", (PartitionNode("node1", 32, 256 * 2**30),))
    >>> cpu_shape_problem(8, 2**30, offer) is None
    True
    >>> print(cpu_shape_problem(64, 2**30, offer))
    cores_per_node=64 is more than the 32 cores a node of partition 'debug' has: use cores_per_node<=32
    """
    if not offer.nodes:
        return None
    cpus, most = max(n.cpus for n in offer.nodes), max(n.memory for n in offer.nodes)
    where = f"a {offer.node_word} of {offer.where}"
    if cpus and cores > cpus:
        return (f"cores_per_node={cores} is more than the {cpus} cores {where} has: "
                f"use cores_per_node<={cpus}")
    if most and memory > most:
        return (f"memory_per_node ({_gib(memory)}) is more than the {_gib(most)} {where} has: "
                f"use memory_per_node<={most // 2**30}GiB")
    return None


def shape_problem(shape: GPUJobShape, offer: QueueOffer | list[PartitionNode]) -> str | None:
    """Why ``shape`` cannot run in ``offer`` (naming the field, what the nodes have and the
    fix), or None when it fits or nothing is known. A list of nodes is SLURM's default
    partition (or partition ``shape.queue``).

    Examples
    --------
    >>> nodes = [PartitionNode("node1", 32, 256 * 2**30, (("h100", 4),))]
    >>> shape_problem(GPUJobShape.create(gpus_per_node=4), nodes) is None
    True
    >>> print(shape_problem(GPUJobShape.create(gpus_per_node=8, queue="gpu"), nodes))
    gpus_per_node=8 is more than the 4 GPUs a node of partition 'gpu' has (gpu:h100:4 on node1): \
use gpus_per_node<=4 and more nodes, or another partition with larger nodes
    >>> offer = QueueOffer("queue", "gpu.q", refusal="queue 'gpu.q' does not exist: ...")
    >>> shape_problem(GPUJobShape.create(), offer)
    "queue 'gpu.q' does not exist: ..."
    """
    if not isinstance(offer, QueueOffer):
        offer = QueueOffer("partition", shape.queue, tuple(offer))
    if offer.refusal:
        return offer.refusal
    if not offer.nodes:
        return None
    return _gpu_problem(shape, offer) or _host_problem(shape, offer) or _job_problem(shape, offer)


def alternatives_text(kind: str, fits: list[str] | None) -> str:
    """The sentence a refusal ends with.

    Examples
    --------
    >>> alternatives_text("partition", ["debug", "gpu"])
    'partitions that exist and can run this job: debug, gpu'
    >>> alternatives_text("queue", [])
    'no queue here can run this job as asked'
    >>> alternatives_text("queue", None)
    ''
    """
    if fits is None:
        return ""
    if not fits:
        return f"no {kind} here can run this job as asked"
    return f"{kind}s that exist and can run this job: {', '.join(fits)}"
