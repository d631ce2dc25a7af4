"""What a PBS Pro queue offers: ``qstat -Qf -F json QUEUE`` and ``pbsnodes -av -F json``.

The parsers follow the documented JSON of PBS Pro (OpenPBS) 19+ and are tested on fixtures
written from it (``tests/data/pbs-*.json``), on captured answers and live on the real OpenPBS
23.06.06 of the tests (``tests/integration/test_queues_pbs_lsf.py``).
"""

from __future__ import annotations

import json
import re

from hpcgpu.jobspec.queues.offer import PartitionNode, QueryUnavailable, QueueOffer, query
from hpcgpu.jobspec.resources import GPUJobShape

__all__ = ["pbs_size", "parse_pbsnodes", "parse_queue", "pbs_offer", "pbs_offers"]

_UNITS = {"": 1, "b": 1, "w": 8, "kb": 2**10, "kw": 8 * 2**10, "mb": 2**20, "mw": 8 * 2**20,
          "gb": 2**30, "gw": 8 * 2**30, "tb": 2**40, "tw": 8 * 2**40}


def pbs_size(value) -> int | None:
    """A PBS size (``527672488kb``, ``256gb``, ``1024``) in bytes; None where not a size.

    >>> pbs_size("256gb"), pbs_size("1024kb"), pbs_size(512), pbs_size("lots")
    (274877906944, 1048576, 512, None)
    """
    match = re.fullmatch(r"(\d+)([kmgt]?[bw]?)", str(value).strip().lower())
    return int(match.group(1)) * _UNITS[match.group(2)] if match else None


def _load(text: str, key: str) -> dict:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise QueryUnavailable(f"not PBS JSON ({exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get(key), dict):
        raise QueryUnavailable(f"PBS JSON without {key!r}")
    return data[key]


def parse_pbsnodes(text: str, queue: str | None = None,
                   gpu_type_resource: str = "gpu_model") -> list[PartitionNode]:
    """The vnodes a job of ``queue`` can run on, from ``pbsnodes -av -F json``.

    A queue with vnodes associated with it (their ``queue`` attribute) runs its jobs there
    only; any other queue runs them on the vnodes associated with no queue. None: every vnode.

    Examples
    --------
    >>> text = ('{"nodes": {"g1": {"queue": "gpu", "resources_available": {"ncpus": 64, '
    ...         '"ngpus": 4, "mem": "512gb", "gpu_model": "a100"}}, '
    ...         '"c1": {"resources_available": {"ncpus": 128, "mem": "256gb"}}}}')
    >>> [n.name for n in parse_pbsnodes(text, "gpu")], [n.name for n in parse_pbsnodes(text, "workq")]
    (['g1'], ['c1'])
    >>> parse_pbsnodes(text, "gpu")[0]
    PartitionNode(name='g1', cpus=64, memory=549755813888, gpus=(('a100', 4),), slots=0)
    """
    vnodes = _load(text, "nodes")
    if queue:
        mine = {k: v for k, v in vnodes.items() if v.get("queue") == queue}
        vnodes = mine or {k: v for k, v in vnodes.items() if not v.get("queue")}
    nodes = []
    for name, info in vnodes.items():
        res = info.get("resources_available", {})
        gpus = int(res.get("ngpus", 0) or 0)
        kind = str(res.get(gpu_type_resource, ""))
        nodes.append(PartitionNode(name, int(res.get("ncpus", 0) or 0),
                                   pbs_size(res.get("mem", 0)) or 0,
                                   ((kind, gpus),) if gpus else ()))
    return nodes


def parse_queue(text: str, queue: str) -> dict:
    """``queue``'s attributes from ``qstat -Qf -F json queue``."""
    queues = _load(text, "Queue")
    if queue not in queues:
        raise QueryUnavailable(f"qstat -Qf did not list queue {queue!r}")
    return queues[queue]


def _limits(info: dict) -> dict:
    top = info.get("resources_max", {})
    out = dict(max_gpus=top.get("ngpus"), max_nodes=top.get("nodect"),
               max_memory=pbs_size(top["mem"]) if "mem" in top else None)
    return {k: (int(v) if v is not None else None) for k, v in out.items()}


def pbs_offer(shape: GPUJobShape, dialect=None) -> QueueOffer:
    """What ``shape.queue`` (every vnode where None) offers, with its ``resources_max``."""
    gpu_resource = getattr(dialect, "gpu_resource", "ngpus")
    base = dict(kind="queue", name=shape.queue,
                gpu_text=lambda n: f"{gpu_resource}={n.gpu_count}")
    limits: dict = {}
    if shape.queue:
        result = query(["qstat", "-Qf", "-F", "json", shape.queue], empty=True, answers="unknown queue")
        if result.returncode != 0:
            return QueueOffer(**base, refusal=(f"queue={shape.queue!r} is not a queue of this "
                                               "PBS server (qstat -Q lists them): use one of those"))
        info = parse_queue(result.stdout, shape.queue)
        if str(info.get("enabled", "True")) == "False":
            return QueueOffer(**base, refusal=(f"queue={shape.queue!r} is not enabled (it takes "
                                               "no new jobs): use another queue"))
        limits = _limits(info)
        if info.get("queue_type") == "Route":  # its jobs go to other queues' vnodes
            return QueueOffer(**base, nodes=tuple(_nodes(None, dialect)), **limits)
    return QueueOffer(**base, nodes=tuple(_nodes(shape.queue, dialect)), **limits)


def _nodes(queue: str | None, dialect) -> list[PartitionNode]:
    text = query(["pbsnodes", "-av", "-F", "json"], empty=True).stdout
    return parse_pbsnodes(text, queue, getattr(dialect, "gpu_type_resource", "gpu_model"))


def pbs_offers(shape: GPUJobShape, dialect: object = None) -> list[QueueOffer]:
    """Every enabled execution or routing queue, from one ``qstat -Qf -F json`` and one
    ``pbsnodes -av -F json``."""
    queues = _load(query(["qstat", "-Qf", "-F", "json"], empty=True).stdout, "Queue")
    nodes = query(["pbsnodes", "-av", "-F", "json"], empty=True).stdout
    kind = getattr(dialect, "gpu_type_resource", "gpu_model")
    offers = []
    for name, info in queues.items():
        if str(info.get("enabled", "True")) == "False":
            continue
        routed = info.get("queue_type") == "Route"  # its jobs run on other queues' vnodes
        found = parse_pbsnodes(nodes, None if routed else name, kind)
        offers.append(QueueOffer("queue", name, tuple(found), **_limits(info)))
    return offers


#: What :meth:`~hpcgpu.schedulers.base.Scheduler.queue_offer` and ``queue_offers`` call.
offer, offers = pbs_offer, pbs_offers
