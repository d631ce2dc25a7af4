"""What a Grid Engine cluster queue offers: ``qconf -spl``, ``qconf -sq``, ``qconf -se``.

Verified against the real SGE 8.1.9 of the test set-up (``tests/integration/test_queues_sge.py``) and
against its captured answers (``tests/data/sge-8.1.9-*.txt``).

``qconf -se`` answers for one host at a time (``qhost -F`` shows what is free now, not what a
host has), so a queue of more than :data:`MAX_HOSTS_ASKED` hosts gets only the queue-level
checks: the constructor must not spend minutes asking.
"""

from __future__ import annotations

from dataclasses import replace
import logging
import re

from hpcgpu.system import commands
from hpcgpu.jobspec.queues.listing import MAX_QUEUES_ASKED
from hpcgpu.jobspec.queues.offer import PartitionNode, QueryUnavailable, QueueOffer, query
from hpcgpu.jobspec.resources import GPUJobShape

__all__ = ["parse_qconf", "queue_values", "sge_memory", "sge_host", "sge_offer", "sge_offers"]

logger = logging.getLogger("hpcgpu.cluster")

#: at most this many ``qconf -se`` calls (about 20 ms each, 200 ms on a busy host)
MAX_HOSTS_ASKED = 64

_UNITS = {"k": 1000, "K": 2**10, "m": 1000**2, "M": 2**20, "g": 1000**3, "G": 2**30,
          "t": 1000**4, "T": 2**40}


def parse_qconf(text: str) -> dict[str, str]:
    r"""``qconf -sq/-se/-sp`` answers (``name value``, ``\`` continues a line) as a dict.

    >>> parse_qconf("hostname  vm\ncomplex_values gpu=4,\\\n   h_vmem=64G\n")
    {'hostname': 'vm', 'complex_values': 'gpu=4,h_vmem=64G'}
    """
    attrs: dict[str, str] = {}
    key = None
    for line in text.splitlines():
        if key and line[:1].isspace():
            attrs[key] += line.strip().rstrip("\\").strip()
        elif line.strip():
            key, _, value = line.partition(" ")
            attrs[key] = value.strip().rstrip("\\").strip()
        if not line.rstrip().endswith("\\"):
            key = None
    return attrs


def queue_values(value: str) -> tuple[str, dict[str, str]]:
    """A queue attribute with per-host overrides: ``8,[vm=4],[@gpu=2]`` -> ``("8", {...})``.

    >>> queue_values("8,[vm=4],[@big=16]")
    ('8', {'vm': '4', '@big': '16'})
    >>> queue_values("gpu=2,[n1=gpu=4,h_vmem=8G]")
    ('gpu=2', {'n1': 'gpu=4,h_vmem=8G'})
    """
    overrides = dict(m.groups() for m in re.finditer(r"\[([^=\]]+)=([^\]]*)\]", value))
    default = re.sub(r",?\[[^\]]*\]", "", value).strip(",")
    return default, overrides


def sge_memory(value: str) -> int | None:
    """``64G``, ``23.541G``, ``24105.55M``, ``INFINITY`` -> bytes (None: no limit/unknown).

    >>> sge_memory("64G"), sge_memory("1.5K"), sge_memory("INFINITY")
    (68719476736, 1536, None)
    """
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT]?)", value.strip())
    if not match:
        return None
    return int(float(match.group(1)) * _UNITS.get(match.group(2), 1))


def _pairs(text: str) -> dict[str, str]:
    return dict(p.split("=", 1) for p in text.split(",") if "=" in p)


def sge_host(text: str, gpu_complex: str = "gpu") -> PartitionNode:
    """A host from ``qconf -se HOST``: GPUs from ``complex_values``, memory from the
    ``h_vmem`` complex value or else the ``mem_total`` load value.

    >>> sge_host("hostname vm\\ncomplex_values gpu=4\\nload_values mem_total=24105.5M,num_proc=2")
    PartitionNode(name='vm', cpus=0, memory=25276448768, gpus=(('', 4),), slots=0)
    """
    attrs = parse_qconf(text)
    values, load = _pairs(attrs.get("complex_values", "")), _pairs(attrs.get("load_values", ""))
    gpus = int(float(values.get(gpu_complex, 0)))
    memory = sge_memory(values.get("h_vmem", "") or load.get("mem_total", "")) or 0
    return PartitionNode(attrs.get("hostname", "?"), 0, memory, (("", gpus),) if gpus else ())


def _qconf(*args: str) -> str:
    return query(["qconf", *args]).stdout


def _hosts(hostlist: str) -> list[str]:
    hosts: list[str] = []
    for item in hostlist.replace(",", " ").split():
        if item == "NONE":
            continue
        hosts += _qconf("-shgrp_resolved", item).split() if item.startswith("@") else [item]
    return list(dict.fromkeys(hosts))


def _for_host(host: str, default: str, overrides: dict[str, str], groups: dict) -> str:
    for key, value in overrides.items():
        if key == host or host in groups.get(key, ()):
            return value
    return default


def _queue_nodes(queue: str, hosts: list[str], attrs: dict[str, str], gpu_complex: str):
    slots, slot_over = queue_values(attrs.get("slots", "0"))
    values, value_over = queue_values(attrs.get("complex_values", "NONE"))
    groups = {g: _hosts(g) for g in {**slot_over, **value_over} if g.startswith("@")}
    nodes = []
    if _too_many(queue, hosts):
        return ()
    for host in hosts:
        node = sge_host(_qconf("-se", host), gpu_complex)
        gpus = node.gpu_count
        queue_gpus = _pairs(_for_host(host, values, value_over, groups)).get(gpu_complex)
        if queue_gpus is not None:  # a queue-level consumable caps the host's
            gpus = min(gpus, int(float(queue_gpus))) if gpus else int(float(queue_gpus))
        nodes.append(PartitionNode(host, 0, node.memory, (("", gpus),) if gpus else (),
                                   int(_for_host(host, slots, slot_over, groups) or 0)))
    return tuple(nodes)


def _too_many(queue: str, hosts: list[str]) -> bool:
    if len(hosts) <= MAX_HOSTS_ASKED:
        return False
    logger.info("%s has %d execution hosts: their GPUs and memory are not checked before "
                "submitting (at most %d are asked); the queue and parallel environment are",
                queue, len(hosts), MAX_HOSTS_ASKED)
    return True


def sge_offer(shape: GPUJobShape, dialect=None) -> QueueOffer:
    """What ``shape.queue`` (every execution host where None) offers, with the definite
    refusals of an unknown queue or parallel environment."""
    gpu_complex = getattr(dialect, "gpu_complex", "gpu")
    pe = (getattr(dialect, "parallel_environment", "smp") if shape.nodes == 1
          else getattr(dialect, "multi_node_parallel_environment", None))
    pes = _qconf("-spl").split()
    base = dict(kind="queue", name=shape.queue, node_word="host",
                gpu_text=lambda n: f"{gpu_complex}={n.gpu_count}", type_matches=None)
    field = "parallel_environment" if shape.nodes == 1 else "multi_node_parallel_environment"
    if pe and pe not in pes:
        return QueueOffer(**base, refusal=(
            f"{field}={pe!r} does not exist on this Grid Engine (qconf -spl: {', '.join(pes)}): "
            f"set {field} to one of them (ask your admins which has allocation_rule "
            f"{'$pe_slots' if shape.nodes == 1 else shape.gpus_per_node})"))
    if not shape.queue:
        hosts = _qconf("-sel").split()
        return QueueOffer(**base, nodes=() if _too_many("any queue", hosts) else
                          tuple(sge_host(_qconf("-se", h), gpu_complex) for h in hosts))
    if not re.fullmatch(r"[\w.-]+", shape.queue):
        raise QueryUnavailable(f"queue={shape.queue!r} is not one cluster queue name")
    result = commands.run(["qconf", "-sq", shape.queue], check=False, timeout=30)
    if "No cluster queue" in result.stdout + result.stderr:  # check_queue lists those that fit
        return QueueOffer(**base, refusal=(f"queue={shape.queue!r} is not a Grid Engine cluster "
                                           "queue (qconf -sql lists them)"))
    attrs = parse_qconf(_qconf("-sq", shape.queue))
    queue_pes = set(re.findall(r"[\w.-]+", attrs.get("pe_list", ""))) - {"NONE"}
    if pe and pe not in queue_pes:
        return QueueOffer(**base, refusal=(
            f"{field}={pe!r} is not in the pe_list of queue {shape.queue!r} "
            f"({attrs.get('pe_list', 'NONE')}): use one of those, or another queue"))
    nodes = _queue_nodes(shape.queue, _hosts(attrs.get("hostlist", "")), attrs, gpu_complex)
    return QueueOffer(**base, nodes=nodes, max_memory_per_slot=sge_memory(attrs.get("h_vmem", "")))


def sge_offers(shape: GPUJobShape, dialect: object = None) -> list[QueueOffer]:
    """Every cluster queue (``qconf -sql``), each asked as the check asks it."""
    names = query(["qconf", "-sql"]).stdout.split()[:MAX_QUEUES_ASKED]
    return [sge_offer(replace(shape, queue=name), dialect) for name in names]


#: What :meth:`~hpcgpu.schedulers.base.Scheduler.queue_offer` and ``queue_offers`` call.
offer, offers = sge_offer, sge_offers
