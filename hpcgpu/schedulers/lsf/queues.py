"""What an LSF queue offers: ``bqueues -l QUEUE``, ``lshosts -w HOSTS``, ``lshosts -gpu HOSTS``.

No LSF runs where hpcgpu is tested: the parsers follow the output documented for IBM
Spectrum LSF 10.1 and are tested on fixtures written from it (``tests/data/lsf-*.txt``) and
on the LSF shims (``tests/shims/lsf``), which answer from the local SLURM.
"""

from __future__ import annotations

from dataclasses import replace
import re

from hpcgpu.system import commands
from hpcgpu.jobspec.queues.listing import MAX_QUEUES_ASKED
from hpcgpu.jobspec.queues.offer import PartitionNode, QueryUnavailable, QueueOffer, query
from hpcgpu.jobspec.resources import GPUJobShape

__all__ = ["lsf_size", "parse_bqueues", "parse_bqueues_w", "parse_lshosts", "parse_lshosts_gpu",
           "gmodel_matches", "lsf_offer", "lsf_offers"]

_UNITS = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def lsf_size(value: str) -> int:
    """lshosts' ``maxmem`` (``255.8G``, ``257580M``) in bytes; 0 where unknown (``-``).

    >>> lsf_size("256G"), lsf_size("1024M"), lsf_size("-")
    (274877906944, 1073741824, 0)
    """
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([KMGT])B?", value.strip(), re.IGNORECASE)
    return int(float(match.group(1)) * _UNITS[match.group(2).upper()]) if match else 0


def parse_bqueues(text: str) -> dict:
    """``bqueues -l QUEUE``: its status, its ``HOSTS:`` and its most tasks per job.

    >>> text = ("QUEUE: gpu\\nPRIO NICE STATUS MAX\\n 30 20 Open:Active -\\n"
    ...         "TASKLIMIT\\n 1 8 16\\nHOSTS:  hg_gpu/ gpu01+2\\n")
    >>> parse_bqueues(text)
    {'status': 'Open:Active', 'hosts': ['hg_gpu', 'gpu01'], 'max_tasks': 16}
    """
    status = re.search(r"^\s*\d+\s+-?\d+\s+(\S+:\S+)", text, re.MULTILINE)
    hosts = re.search(r"^HOSTS:\s*(.*)$", text, re.MULTILINE)
    limit = re.search(r"^[ \t]*(?:TASKLIMIT|PROCLIMIT)[ \t]*\n\s*([\d ]+)$", text, re.MULTILINE)
    return {"status": status.group(1) if status else "",
            "hosts": [re.sub(r"\+\d+$", "", h).rstrip("/") for h in
                      (hosts.group(1).split() if hosts else [])],
            "max_tasks": int(limit.group(1).split()[-1]) if limit else None}


def parse_lshosts(text: str) -> dict[str, tuple[int, int]]:
    """``lshosts -w``: host -> (ncpus, maxmem bytes); 0 where lshosts says ``-``."""
    lines = [line.split() for line in text.splitlines() if line.strip()]
    if not lines or lines[0][:1] != ["HOST_NAME"]:
        raise QueryUnavailable("lshosts -w: no HOST_NAME header")
    head = lines[0]
    cpus, mem = head.index("ncpus"), head.index("maxmem")
    return {row[0]: (int(row[cpus]) if row[cpus].isdigit() else 0, lsf_size(row[mem]))
            for row in lines[1:] if len(row) > max(cpus, mem)}


def parse_lshosts_gpu(text: str) -> dict[str, tuple[tuple[str, int], ...]]:
    """``lshosts -gpu``: host -> GPUs by model (a host's further GPUs are on indented lines).

    >>> text = ("HOST_NAME gpu_id gpu_model gpu_driver gpu_factor numa_id vendor\\n"
    ...         "hosta 0 TeslaV100 384.10 70 0 Nvidia\\n      1 TeslaV100 384.10 70 0 Nvidia\\n")
    >>> parse_lshosts_gpu(text)
    {'hosta': (('TeslaV100', 2),)}
    """
    hosts: dict[str, dict[str, int]] = {}
    host = None
    for line in text.splitlines()[1:]:
        parts = line.split()
        if not parts:
            continue
        if not line[:1].isspace():
            host, parts = parts[0], parts[1:]
            hosts.setdefault(host, {})
        if host and len(parts) >= 2 and parts[0].isdigit():
            hosts[host][parts[1]] = hosts[host].get(parts[1], 0) + 1
    return {h: tuple(models.items()) for h, models in hosts.items()}


def gmodel_matches(asked: str, model: str) -> bool:
    """Whether ``-gpu "gmodel=asked"`` can take a GPU lshosts calls ``model`` (a brand, a
    model or a ``model-memory`` name: the part before ``-`` found in the model's name).

    >>> gmodel_matches("TeslaV100", "TeslaV100_SXM2_32GB"), gmodel_matches("a100", "TeslaV100")
    (True, False)
    """
    return asked.split("-")[0].lower() in model.lower()


def lsf_offer(shape: GPUJobShape, dialect=None) -> QueueOffer:
    """What ``shape.queue`` (every host where None) offers."""
    base = dict(kind="queue", name=shape.queue, node_word="host", type_matches=gmodel_matches,
                gpu_text=lambda n: " + ".join(f"{c} x {t}" for t, c in n.gpus) or "no GPU")
    hosts: list[str] = []
    max_tasks = None
    if shape.queue:
        result = commands.run(["bqueues", "-l", shape.queue], check=False, timeout=30)
        if "No such queue" in result.stdout + result.stderr:
            return QueueOffer(**base, refusal=(f"queue={shape.queue!r} is not an LSF queue "
                                               "(bqueues lists them): use one of those"))
        queue = parse_bqueues(query(["bqueues", "-l", shape.queue]).stdout)
        if queue["status"].startswith("Closed"):
            return QueueOffer(**base, refusal=(f"queue={shape.queue!r} is closed "
                                               f"({queue['status']}): use another queue"))
        hosts, max_tasks = queue["hosts"], queue["max_tasks"]
        if any(h in ("all", "others", "none") or h.startswith("~") for h in hosts):
            hosts = []  # every host (an upper bound: never refuses what could run)
    cpus_mem = parse_lshosts(query(["lshosts", "-w", *hosts]).stdout)
    gpus = parse_lshosts_gpu(query(["lshosts", "-gpu", *hosts]).stdout)
    nodes = tuple(PartitionNode(h, c, m, gpus.get(h, ())) for h, (c, m) in cpus_mem.items())
    return QueueOffer(**base, nodes=nodes, max_gpus=max_tasks)


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
    names = parse_bqueues_w(query(["bqueues", "-w"]).stdout)[:MAX_QUEUES_ASKED]
    return [lsf_offer(replace(shape, queue=name), dialect) for name in names]


#: What :meth:`~hpcgpu.schedulers.base.Scheduler.queue_offer` and ``queue_offers`` call.
offer, offers = lsf_offer, lsf_offers
