"""The allocation ``hpcgpu run`` is running in: which batch system, how many nodes and GPUs.

Pure functions of the process environment (plus an optional ``nvidia-smi`` probe), so
they are tested without a batch system. An explicit option always wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

from hpcgpu.worker.gpuinfo import count_nvidia_smi_gpus
from hpcgpu.resources import GPUJobShape

__all__ = ["Allocation", "detect_allocation", "count_nvidia_smi_gpus", "DEFAULT_LAUNCHERS"]

#: batch system -> launcher that starts one task per GPU across its nodes
DEFAULT_LAUNCHERS = {"slurm": "srun", "pbs": "mpiexec", "lsf": "jsrun", "sge": "mpirun", None: "direct"}


@dataclass(frozen=True)
class Allocation:
    """Nodes and GPUs granted to this job.

    Attributes
    ----------
    scheduler : str or None
        ``slurm``, ``pbs``, ``lsf``, ``sge``; None outside a batch job.
    job_id : str or None
        The batch system's job id.
    nodes : int
        Nodes in the allocation.
    gpus_per_node : int
        GPUs on each node, hence workers per node.
    cpus_per_node : int
        Cores granted on each node (the first node's count).
    hosts : tuple of str
        Host names where the batch system lists them (may be empty).
    gpus_per_task : int or None
        GPUs the batch system binds to each task (SLURM ``--gpus-per-task``); None where
        GPUs belong to nodes, not tasks.
    tasks : int or None
        The job's tasks (SLURM ``--ntasks``), where GPUs are bound to tasks.
    cpus_per_task : int or None
        Cores per task asked for (SLURM ``-c``); None when not asked (one).
    total : int or None
        GPUs in all where the batch system states it and nodes may differ (SLURM
        ``--gpus=N``: ``-N2 --gpus=3`` is 2 + 1).

    Examples
    --------
    >>> a = Allocation("slurm", "42", nodes=2, gpus_per_node=4, cpus_per_node=32)
    >>> a.total_gpus, a.cpus_per_gpu, a.default_launcher
    (8, 8, 'srun')
    >>> a.shape().nodes, a.shape().gpus_per_node
    (2, 4)

    One GPU bound to each of 4 tasks, and GPUs that differ between nodes:

    >>> Allocation("slurm", "8", nodes=2, gpus_per_node=2, cpus_per_node=2, gpus_per_task=1,
    ...            tasks=4).total_gpus
    4
    >>> b = Allocation("slurm", "9", nodes=2, gpus_per_node=2, cpus_per_node=1, total=3)
    >>> b.total_gpus, b.uniform
    (3, False)
    """

    scheduler: str | None
    job_id: str | None
    nodes: int
    gpus_per_node: int
    cpus_per_node: int
    hosts: tuple[str, ...] = ()
    gpus_per_task: int | None = None
    tasks: int | None = None
    cpus_per_task: int | None = None
    total: int | None = None

    @property
    def total_gpus(self) -> int:
        """GPUs, hence workers, in the allocation."""
        if self.gpus_per_task and self.tasks:
            return self.tasks * self.gpus_per_task
        return self.total or self.nodes * self.gpus_per_node

    @property
    def uniform(self) -> bool:
        """Whether every node has ``gpus_per_node`` GPUs (else only the total is known)."""
        return self.total_gpus == self.nodes * self.gpus_per_node

    @property
    def layout(self) -> str:
        """How the GPUs are laid out, in words.

        Examples
        --------
        >>> Allocation("slurm", "1", nodes=2, gpus_per_node=2, cpus_per_node=1, total=3).layout
        '2 node(s) with 3 GPU(s) in all'
        >>> Allocation("slurm", "1", nodes=1, gpus_per_node=2, cpus_per_node=2,
        ...            gpus_per_task=1, tasks=2).layout
        '2 task(s) x 1 GPU(s) on 1 node(s)'
        """
        if self.gpus_per_task:
            return f"{self.tasks} task(s) x {self.gpus_per_task} GPU(s) on {self.nodes} node(s)"
        if not self.uniform:
            return f"{self.nodes} node(s) with {self.total_gpus} GPU(s) in all"
        return f"{self.nodes} node(s) x {self.gpus_per_node} GPU(s)"

    @property
    def cpus_per_gpu(self) -> int:
        """Cores for each GPU's worker (at least 1)."""
        return max(1, self.cpus_per_node // self.gpus_per_node)

    @property
    def default_launcher(self) -> str:
        """The batch system's usual launcher; ``direct`` on one node of SGE or no scheduler."""
        if self.nodes == 1 and self.scheduler in ("sge", None):
            return "direct"
        return DEFAULT_LAUNCHERS[self.scheduler]

    def shape(self) -> GPUJobShape:
        """The allocation as a :class:`~hpcgpu.resources.GPUJobShape`, for the launchers."""
        return GPUJobShape.create(nodes=self.nodes, gpus_per_node=self.gpus_per_node,
                                  cpus_per_gpu=self.cpus_per_gpu)


def _int(value: str | None) -> int | None:
    head = (value or "").split("(")[0].split(",")[0].strip()
    return int(head) if head.isdigit() else None


def _count(value: str | None) -> int | None:
    """A GPU count as SLURM writes it: ``2``, ``gpu:2``, ``h100:2``."""
    return _int((value or "").split(",")[0].rsplit(":", 1)[-1])


def _min_cpus(value: str | None) -> int | None:
    """The smallest node of ``SLURM_JOB_CPUS_PER_NODE`` (``32``, ``2(x2)``, ``4,2(x3)``)."""
    counts = [_int(part) for part in (value or "").split(",")]
    return min((c for c in counts if c), default=None)


def _ids(value: str | None) -> list[str]:
    """GPU ids in ``CUDA_VISIBLE_DEVICES`` (comma) or ``SGE_HGR_gpu`` (space) form."""
    return [v for v in (value or "").replace(",", " ").split() if v and v != "NoDevFiles"]


def _unique_lines(path: str | None, column: int = 0) -> list[str]:
    if not path or not Path(path).is_file():
        return []
    hosts: list[str] = []
    for line in Path(path).read_text().splitlines():
        parts = line.split()
        if len(parts) > column and parts[column] not in hosts:
            hosts.append(parts[column])
    return hosts


def _scheduler_of(env: Mapping[str, str]) -> str | None:
    if env.get("SLURM_JOB_ID"):
        return "slurm"
    if env.get("PBS_JOBID"):
        return "pbs"
    if env.get("LSB_JOBID"):
        return "lsf"
    if env.get("JOB_ID") and (env.get("SGE_ROOT") or env.get("PE_HOSTFILE") or env.get("SGE_TASK_ID")):
        return "sge"
    return None


def _hosts_and_cpus(scheduler: str | None, env: Mapping[str, str]) -> tuple[list[str], int | None, int | None]:
    """(hosts, node count, cores on this node) as the batch system states them."""
    if scheduler == "slurm":
        nodes = _int(env.get("SLURM_JOB_NUM_NODES")) or _int(env.get("SLURM_NNODES"))
        # every node's step gets at most the smallest node's cores
        cpus = _min_cpus(env.get("SLURM_JOB_CPUS_PER_NODE")) or _int(env.get("SLURM_CPUS_ON_NODE"))
        return [], nodes, cpus
    if scheduler == "pbs":
        hosts = _unique_lines(env.get("PBS_NODEFILE"))
        return hosts, len(hosts) or None, _int(env.get("NCPUS"))
    if scheduler == "lsf":
        pairs = _lsf_slots(env)
        # CORAL-style sites list the launch node first with one slot: it runs no GPU task.
        if len(pairs) > 1 and pairs[0][1] == 1 and all(n > 1 for _, n in pairs[1:]):
            pairs = pairs[1:]
        hosts = [h for h, _ in pairs]
        return hosts, len(hosts) or None, pairs[0][1] if pairs else None
    if scheduler == "sge":
        hosts = _unique_lines(env.get("PE_HOSTFILE"))
        return hosts, len(hosts) or 1, _int(env.get("NSLOTS"))
    return [], 1, None


def _lsf_slots(env: Mapping[str, str]) -> list[tuple[str, int]]:
    """(host, slots) from ``LSB_MCPU_HOSTS``, else ``$LSB_DJOB_HOSTFILE`` (a line per slot)."""
    words = env.get("LSB_MCPU_HOSTS", "").split()
    if words:
        return list(zip(words[::2], (int(n) for n in words[1::2])))
    path = env.get("LSB_DJOB_HOSTFILE")
    if not path or not Path(path).is_file():
        return []
    lines = [line.split()[0] for line in Path(path).read_text().splitlines() if line.split()]
    return [(host, lines.count(host)) for host in dict.fromkeys(lines)]


def _gpus_from_env(scheduler: str | None, env: Mapping[str, str]) -> int | None:
    if scheduler == "slurm":
        # SLURM_GPUS_ON_NODE: with --gpus-per-node/--gres; SLURM_JOB_GPUS: the batch node's ids
        count = _int(env.get("SLURM_GPUS_ON_NODE")) or len(_ids(env.get("SLURM_JOB_GPUS")))
        if count:
            return count
    if scheduler == "sge" and _ids(env.get("SGE_HGR_gpu")):
        return len(_ids(env.get("SGE_HGR_gpu")))
    return len(_ids(env.get("CUDA_VISIBLE_DEVICES"))) or None


def detect_allocation(
    env: Mapping[str, str] | None = None,
    *,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    probe_gpus: Callable[[], int | None] = count_nvidia_smi_gpus,
) -> Allocation:
    """Read the allocation from the batch system's environment.

    GPUs per node, first found: ``gpus_per_node``; SLURM's ``SLURM_GPUS_ON_NODE`` or
    ``SLURM_JOB_GPUS``; SGE's ``SGE_HGR_gpu``; ``CUDA_VISIBLE_DEVICES``; ``nvidia-smi -L``.

    Examples
    --------
    >>> env = {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_GPUS_ON_NODE": "4",
    ...        "SLURM_CPUS_ON_NODE": "32", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    >>> detect_allocation(env)
    Allocation(scheduler='slurm', job_id='7', nodes=2, gpus_per_node=4, cpus_per_node=32, \
hosts=(), gpus_per_task=None, tasks=None, cpus_per_task=None, total=None)
    >>> detect_allocation({}, probe_gpus=lambda: None)
    Traceback (most recent call last):
    ...
    ValueError: gpus_per_node is unknown: no SLURM_GPUS_ON_NODE, SGE_HGR_gpu, CUDA_VISIBLE_DEVICES \
or nvidia-smi here; pass --gpus-per-node N (e.g. --gpus-per-node 4)
    """
    env = os.environ if env is None else env
    scheduler = _scheduler_of(env)
    job_id = {"slurm": "SLURM_JOB_ID", "pbs": "PBS_JOBID", "lsf": "LSB_JOBID", "sge": "JOB_ID"}
    hosts, found_nodes, cpus = _hosts_and_cpus(scheduler, env)
    gpus = gpus_per_node or _gpus_from_env(scheduler, env) or probe_gpus()
    if not gpus:
        raise ValueError(
            "gpus_per_node is unknown: no SLURM_GPUS_ON_NODE, SGE_HGR_gpu, CUDA_VISIBLE_DEVICES "
            "or nvidia-smi here; pass --gpus-per-node N (e.g. --gpus-per-node 4)"
        )
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}={value!r} must be a whole number of at least 1")
    return Allocation(
        scheduler=scheduler,
        job_id=env.get(job_id[scheduler]) if scheduler else None,
        nodes=nodes or found_nodes or 1,
        gpus_per_node=gpus,
        cpus_per_node=cpus or os.cpu_count() or 1,
        hosts=tuple(hosts),
        **({} if gpus_per_node or nodes else _slurm_tasks(scheduler, env)),
    )


def _slurm_tasks(scheduler: str | None, env: Mapping[str, str]) -> dict:
    """SLURM's binding of GPUs to tasks, cores per task and total GPU count, as asked for."""
    if scheduler != "slurm":
        return {}
    per_task = _count(env.get("SLURM_GPUS_PER_TASK"))
    tasks = _int(env.get("SLURM_NTASKS")) or _int(env.get("SLURM_NPROCS"))
    return dict(gpus_per_task=per_task if per_task and tasks else None,
                tasks=tasks if per_task else None,
                cpus_per_task=_int(env.get("SLURM_CPUS_PER_TASK")),
                total=_count(env.get("SLURM_GPUS")))

