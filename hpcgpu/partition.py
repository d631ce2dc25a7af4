"""What the nodes of a partition have, from the scheduler, and whether a job shape fits them.

SLURM only (``sinfo``); where the scheduler cannot be asked (another scheduler, no
``sinfo``, an error, an unknown partition), :func:`check_partition` changes nothing and the
scheduler's own answer stands.
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcgpu import commands
from hpcgpu.resources import GPUJobShape

__all__ = ["PartitionNode", "parse_sinfo", "slurm_partition_nodes", "shape_problem", "check_partition",
           "cpu_shape_problem", "check_cpu_partition"]

#: sinfo's one line per node and partition: name, CPUs, memory (MB), GRES, partition
SINFO_FORMAT = "%N|%c|%m|%G|%P"


@dataclass(frozen=True)
class PartitionNode:
    """One node: its name, cores, memory (bytes) and GPUs by type (``""``: untyped)."""

    name: str
    cpus: int
    memory: int
    gpus: tuple[tuple[str, int], ...] = ()

    @property
    def gpu_count(self) -> int:
        return sum(n for _, n in self.gpus)

    def gpus_of(self, gpu_type: str | None) -> int:
        """GPUs of ``gpu_type`` (all where None)."""
        return sum(n for t, n in self.gpus if gpu_type is None or t == gpu_type)


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
    [PartitionNode(name='node1', cpus=32, memory=274877906944, gpus=(('h100', 4),))]
    >>> parse_sinfo("node9|64|512000|(null)|cpu*\\n")
    [PartitionNode(name='node9', cpus=64, memory=536870912000, gpus=())]
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
    """The partition's nodes (the default partition's when None); ``[]`` when SLURM
    cannot be asked."""
    argv = ["sinfo", "--noheader", "--Node", f"--format={SINFO_FORMAT}"]
    result = commands.run(argv, check=False, timeout=30)
    return parse_sinfo(result.stdout, partition) if result.returncode == 0 else []


def _gib(size: int) -> str:
    return f"{size / 2**30:.0f} GiB"


def shape_problem(shape: GPUJobShape, nodes: list[PartitionNode]) -> str | None:
    """Why ``shape`` cannot run on ``nodes`` (naming the field, what the nodes have and the
    fix), or None when it fits or nothing is known.

    Examples
    --------
    >>> nodes = [PartitionNode("node1", 32, 256 * 2**30, (("h100", 4),))]
    >>> shape_problem(GPUJobShape.create(gpus_per_node=4), nodes) is None
    True
    >>> print(shape_problem(GPUJobShape.create(gpus_per_node=8, queue="gpu"), nodes))
    gpus_per_node=8 is more than the 4 GPUs a node of partition 'gpu' has (gpu:h100:4): use gpus_per_node<=4 and more nodes
    """
    if not nodes:
        return None
    where = f"partition {shape.queue!r}" if shape.queue else "the default partition"
    kind = shape.gpu_type
    if kind and not any(n.gpus_of(kind) for n in nodes):
        types = sorted({t for n in nodes for t, _ in n.gpus if t}) or ["(untyped)"]
        return (f"gpu_type={kind!r}: the nodes of {where} have GPUs of type "
                f"{', '.join(types)}: use gpu_type={types[0]!r}, or another queue")
    have = max(nodes, key=lambda n: n.gpus_of(kind))
    if shape.gpus_per_node > have.gpus_of(kind):
        gres = ",".join(f"gpu:{t}:{c}" if t else f"gpu:{c}" for t, c in have.gpus) or "no GPU"
        return (f"gpus_per_node={shape.gpus_per_node} is more than the {have.gpus_of(kind)} GPUs "
                f"a node of {where} has ({gres}): use gpus_per_node<={have.gpus_of(kind)} and "
                "more nodes")
    cpus = max(n.cpus for n in nodes)
    if shape.cpus_per_node > cpus:
        return (f"cpus_per_gpu={shape.cpus_per_gpu} x gpus_per_node={shape.gpus_per_node} = "
                f"{shape.cpus_per_node} CPUs is more than the {cpus} a node of {where} has: "
                f"use cpus_per_gpu<={max(1, cpus // shape.gpus_per_node)}")
    memory, most = shape.node_memory, max(n.memory for n in nodes)
    if memory and most and memory > most:
        return (f"memory per node ({_gib(memory)}) is more than the {_gib(most)} a node of "
                f"{where} has: ask for memory_per_gpu<={most // shape.gpus_per_node // 2**30}GiB")
    fit = [n for n in nodes if n.gpus_of(kind) >= shape.gpus_per_node
           and n.cpus >= shape.cpus_per_node and (not memory or not n.memory or n.memory >= memory)]
    if shape.nodes > len(fit):
        return (f"nodes={shape.nodes} is more than the {len(fit)} node(s) of {where} that have "
                f"{shape.gpus_per_node} GPU(s), {shape.cpus_per_node} CPUs and the memory asked "
                f"for: use nodes<={len(fit)}")
    return None


def check_partition(scheduler: str, shape: GPUJobShape) -> None:
    """Raise ``ValueError`` before anything is submitted where ``shape`` cannot fit the
    partition's nodes; nothing where the scheduler cannot be asked (not SLURM, no sinfo)."""
    if scheduler != "slurm":
        return
    problem = shape_problem(shape, slurm_partition_nodes(shape.queue))
    if problem:
        raise ValueError(problem)


def cpu_shape_problem(cores: int, memory: int, queue: str | None,
                      nodes: list[PartitionNode]) -> str | None:
    """Why a CPU pool's job (one node of ``cores`` cores and ``memory`` bytes) cannot run
    on ``nodes``, or None when it fits or nothing is known.

    >>> nodes = [PartitionNode("node1", 32, 256 * 2**30)]
    >>> cpu_shape_problem(8, 2**30, "debug", nodes) is None
    True
    >>> print(cpu_shape_problem(64, 2**30, "debug", nodes))
    cores_per_node=64 is more than the 32 cores a node of partition 'debug' has: use cores_per_node<=32
    """
    if not nodes:
        return None
    where = f"partition {queue!r}" if queue else "the default partition"
    cpus, most = max(n.cpus for n in nodes), max(n.memory for n in nodes)
    if cores > cpus:
        return (f"cores_per_node={cores} is more than the {cpus} cores a node of {where} has: "
                f"use cores_per_node<={cpus}")
    if most and memory > most:
        return (f"memory_per_node ({_gib(memory)}) is more than the {_gib(most)} a node of "
                f"{where} has: use memory_per_node<={most // 2**30}GiB")
    return None


def check_cpu_partition(scheduler: str, queue: str | None, cores: int, memory: int) -> None:
    """:func:`check_partition` for a CPU pool's job."""
    if scheduler != "slurm":
        return
    problem = cpu_shape_problem(cores, memory, queue, slurm_partition_nodes(queue))
    if problem:
        raise ValueError(problem)
