"""The GPU job shape: one frozen, validated value that every dialect renders.

A shape says what one batch job asks for: ``nodes`` nodes, each with
``gpus_per_node`` GPUs, ``cpus_per_gpu`` cores and memory per GPU (or per node),
for ``walltime``. One Dask worker runs per GPU, so ``gpus_per_node`` is also the
number of tasks per node.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields
from typing import Any

from hpcgpu.jobspec.keywords import MAX_WORKERS, form_of, whole_number
from hpcgpu.jobspec.units import format_hms, parse_memory, parse_walltime
from hpcgpu.system.spelling import closest

__all__ = ["GPUJobShape", "NodeLimits"]

_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_.-]{0,62}")
_TOKEN_RE = re.compile(r"[A-Za-z0-9_.:@+=,/-]+")
#: An account may also hold spaces (SLURM's do: "Dask On SLURM"); a dialect whose directive
#: lines cannot carry them refuses them (Dialect.quoted_fields).
_ACCOUNT_RE = re.compile(r"[A-Za-z0-9_.:@+=,/-](?:[A-Za-z0-9_.:@+=,/ -]*[A-Za-z0-9_.:@+=,/-])?")

#: Host memory one GPU worker needs at least: its process holds about 0.1 GiB before CUDA
#: (a CPU worker after a small computation here), CUDA, CuPy and RMM add some hundreds of
#: MB, and a nanny restarts a worker above 95 % of its limit, again and again below this.
MIN_WORKER_MEMORY = 2**30


@dataclass(frozen=True)
class NodeLimits:
    """What one node of a site holds, when the site profile says so (``None``: unknown).

    Examples
    --------
    >>> NodeLimits(cpus=64, gpus=4).cpus
    64
    """

    cpus: int | None = None
    gpus: int | None = None
    memory: int | None = None


@dataclass(frozen=True)
class GPUJobShape:
    """What one GPU batch job asks for; build it with :meth:`create` to validate input.

    Attributes
    ----------
    nodes, gpus_per_node, cpus_per_gpu : int
        Job size: one task (Dask worker) per GPU.
    memory_per_gpu, memory_per_node : int or None
        Host memory in bytes; at most one of the two is set.
    walltime : int
        Seconds.
    queue, account, job_name, gpu_type : str or None
        Scheduler names; ``gpu_type`` such as ``"h100"`` where the site types its GPUs.
    exclusive : bool
        Ask for whole nodes.

    Examples
    --------
    >>> shape = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=8,
    ...                            memory_per_gpu="60GiB", walltime="01:00:00")
    >>> shape.total_gpus, shape.cpus_per_node, shape.walltime_hms
    (8, 32, '01:00:00')
    >>> GPUJobShape.create(gpus_per_node=0)
    Traceback (most recent call last):
    ...
    ValueError: gpus_per_node=0 must be a whole number of at least 1 (e.g. gpus_per_node=4)
    """

    nodes: int = 1
    gpus_per_node: int = 1
    cpus_per_gpu: int = 1
    memory_per_gpu: int | None = None
    memory_per_node: int | None = None
    walltime: int = 3600
    queue: str | None = None
    account: str | None = None
    job_name: str = "hpcgpu"
    gpu_type: str | None = None
    exclusive: bool = False

    @classmethod
    def create(cls, limits: NodeLimits | None = None, **options: Any) -> "GPUJobShape":
        """Validate the forms users write and return a shape, or raise ``ValueError``.

        ``limits`` (a site's :class:`NodeLimits`) adds checks against what a node holds.
        """
        _refuse_unknown(options)
        values = dict(options)
        for name in ("nodes", "gpus_per_node", "cpus_per_gpu"):
            if name in values:
                values[name] = _positive_int(name, values[name])
        _bounded_job(values)
        for name in ("memory_per_gpu", "memory_per_node"):
            if values.get(name) is not None:
                values[name] = parse_memory(values[name], field=name)
        if values.get("memory_per_gpu") and values.get("memory_per_node"):
            raise ValueError(
                "memory_per_gpu and memory_per_node were both given: set only one "
                "(the scheduler takes one memory request, see dask-jobqueue#698)"
            )
        _enough_memory(values, options)
        if "walltime" in values:
            values["walltime"] = parse_walltime(values["walltime"])
        for name in ("queue", "account", "gpu_type"):
            if values.get(name) is not None:
                values[name] = _token(name, values[name])
        if "job_name" in values:
            values["job_name"] = _job_name(values["job_name"])
        if "exclusive" in values and not isinstance(values["exclusive"], bool):
            raise ValueError(f"exclusive={values['exclusive']!r} must be True or False")
        shape = cls(**values)
        if limits is not None:
            shape.check_fits(limits)
        return shape

    @property
    def total_gpus(self) -> int:
        """GPUs (and Dask workers) in the whole job."""
        return self.nodes * self.gpus_per_node

    @property
    def workers_per_job(self) -> int:
        """Dask workers in one job: one per GPU (the same as :attr:`total_gpus`)."""
        return self.total_gpus

    @property
    def cores_per_job(self) -> int:
        """Cores of the whole job (what ``scale(cores=)`` divides by)."""
        return self.cpus_per_node * self.nodes

    @property
    def memory_per_job(self) -> int | None:
        """Host memory of the whole job in bytes (what ``scale(memory=)`` divides by)."""
        memory = self.node_memory
        return None if memory is None else memory * self.nodes

    @property
    def cpus_per_node(self) -> int:
        """Cores asked for on each node."""
        return self.cpus_per_gpu * self.gpus_per_node

    @property
    def node_memory(self) -> int | None:
        """Host memory per node in bytes, whichever way it was given."""
        if self.memory_per_node is not None:
            return self.memory_per_node
        if self.memory_per_gpu is not None:
            return self.memory_per_gpu * self.gpus_per_node
        return None

    @property
    def gpu_memory(self) -> int | None:
        """Host memory per GPU (per worker) in bytes."""
        if self.memory_per_gpu is not None:
            return self.memory_per_gpu
        if self.memory_per_node is not None:
            return self.memory_per_node // self.gpus_per_node
        return None

    @property
    def walltime_hms(self) -> str:
        """Walltime as ``HH:MM:SS``."""
        return format_hms(self.walltime)

    def check_fits(self, limits: NodeLimits) -> None:
        """Raise ``ValueError`` if one node of this shape is larger than ``limits`` allow."""
        if limits.gpus is not None and self.gpus_per_node > limits.gpus:
            raise ValueError(
                f"gpus_per_node={self.gpus_per_node} is more than the {limits.gpus} GPUs a "
                f"node of this site has: use gpus_per_node<={limits.gpus} and more nodes"
            )
        if limits.cpus is not None and self.cpus_per_node > limits.cpus:
            most = max(1, limits.cpus // self.gpus_per_node)
            raise ValueError(
                f"cpus_per_gpu={self.cpus_per_gpu} x gpus_per_node={self.gpus_per_node} = "
                f"{self.cpus_per_node} CPUs is more than the {limits.cpus} a node of this site "
                f"has: use cpus_per_gpu<={most}"
            )
        memory = self.node_memory
        if limits.memory is not None and memory is not None and memory > limits.memory:
            raise ValueError(
                f"memory per node ({memory} bytes) is more than the {limits.memory} bytes a "
                "node of this site has: ask for less memory_per_gpu or memory_per_node"
            )


def _enough_memory(values: dict[str, Any], options: dict[str, Any]) -> None:
    """Refuse memory that a worker cannot live in (``"60"`` is 60 bytes)."""
    name = "memory_per_gpu" if values.get("memory_per_gpu") else "memory_per_node"
    if not values.get(name):
        return
    gpus = values.get("gpus_per_node", 1) if name == "memory_per_node" else 1
    per_worker = values[name] // gpus
    if per_worker >= MIN_WORKER_MEMORY:
        return
    size = f"{per_worker} bytes" if per_worker < 2**20 else f"{per_worker / 2**20:.0f} MiB"
    raise ValueError(
        f"{name}={options[name]!r} is {size} per GPU worker, less than the "
        f"{MIN_WORKER_MEMORY // 2**30} GiB a worker needs at least: ask for more, with a unit "
        f"(e.g. {name}='60GB'; a bare number is bytes)")


def _refuse_unknown(options: dict[str, Any]) -> None:
    known = {f.name for f in fields(GPUJobShape)}
    for name in options:
        if name not in known:
            close = closest(name, sorted(known))
            hint = f"did you mean {close!r}?" if close else f"known: {', '.join(sorted(known))}"
            raise ValueError(f"unknown job shape option {name!r}: {hint}")


def _positive_int(name: str, value: Any) -> int:
    """At least 1, and at most the bound of :mod:`hpcgpu.jobspec.keywords` (the one table)."""
    low_error = ValueError(f"{name}={value!r} must be a whole number of at least 1 (e.g. {name}=4)")
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise low_error
    if isinstance(value, str) and not value.strip().isdigit() or int(value) < 1:
        raise low_error
    return whole_number(name, value, 1, form_of(name).high)


def _bounded_job(values: dict[str, Any]) -> None:
    """Refuse a job of more workers than one Dask scheduler takes (each has a name, made
    at construction)."""
    nodes, gpus = values.get("nodes", 1), values.get("gpus_per_node", 1)
    if nodes * gpus > MAX_WORKERS:
        raise ValueError(
            f"nodes={nodes} x gpus_per_node={gpus} = {nodes * gpus} GPU workers in one job is "
            f"more than the {MAX_WORKERS} hpcgpu accepts (one Dask scheduler takes fewer): "
            "use fewer nodes per job")


def _token(name: str, value: Any) -> str:
    text = str(value)
    if name == "account" and _ACCOUNT_RE.fullmatch(text):
        return text
    if not _TOKEN_RE.fullmatch(text):  # fullmatch: "$" would pass "gpu\n"
        spaces = " (an account may also hold spaces between them)" if name == "account" else ""
        raise ValueError(
            f"{name}={value!r} is not a valid scheduler name: use letters, digits and "
            f"'_.:@+=,/-' only{spaces}: quotes, '$', backslashes, '#', ';' and newlines could "
            "change how the scheduler or the shell reads the job script"
        )
    return text


def _job_name(value: Any) -> str:
    text = str(value)
    if not _NAME_RE.fullmatch(text):
        raise ValueError(
            f"job_name={value!r} is not accepted by every scheduler: start with a letter, then "
            "up to 62 letters, digits or '_.-'"
        )
    return text
