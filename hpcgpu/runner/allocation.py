"""The allocation ``hpcgpu run`` is running in: which batch system, how many nodes and GPUs.

Pure functions of the process environment (plus an optional ``nvidia-smi`` probe), so
they are tested without a batch system. An explicit option always wins.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from hpcgpu.worker.gpuinfo import count_nvidia_smi_gpus
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.launchers.base import NO_LAUNCHER
from hpcgpu.schedulers.registry import detect, get_scheduler, schedulers
from hpcgpu.schedulers.slurm.environment import (_count, _ids, _min_cpus,  # noqa: F401
                                                 _tres_gpus)

__all__ = ["Allocation", "detect_allocation", "count_nvidia_smi_gpus"]


def __getattr__(name: str) -> Any:
    """``DEFAULT_LAUNCHERS``: batch system -> the launcher that starts its tasks across
    nodes (None: no batch system, ``direct``), read from the registry."""
    if name == "DEFAULT_LAUNCHERS":
        return {**{s.name: s.batch_launcher for s in schedulers()}, None: NO_LAUNCHER}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
        """The batch system's usual launcher; ``direct`` on one node of SGE, PBS (whose sites'
        ``mpiexec`` differ: Open MPI's refuses PALS' ``--ppn``) or no scheduler."""
        if self.scheduler is None:
            return NO_LAUNCHER
        return get_scheduler(self.scheduler).launcher_for_allocation(self.nodes)

    def shape(self) -> GPUJobShape:
        """The allocation as a :class:`~hpcgpu.jobspec.resources.GPUJobShape`, for the launchers."""
        return GPUJobShape.create(nodes=self.nodes, gpus_per_node=self.gpus_per_node,
                                  cpus_per_gpu=self.cpus_per_gpu)


def _gpus_from_env(env: Mapping[str, str], scheduler: Any) -> int | None:
    """GPUs per node from the scheduler's variables, else ``CUDA_VISIBLE_DEVICES``; none
    where the scheduler says they cannot be known here."""
    count = scheduler.gpus_from_env(env) if scheduler else None
    if count or (scheduler and scheduler.gpus_unknowable(env)):
        return count
    return len(_ids(env.get("CUDA_VISIBLE_DEVICES"))) or None


def _unknown_gpus(env: Mapping[str, str], scheduler: Any) -> str:
    fix = "pass --gpus-per-node N (e.g. --gpus-per-node 4)"
    reason = scheduler.gpus_unknowable(env) if scheduler else None
    if reason:
        return f"{reason}, or {fix}"
    return ("gpus_per_node is unknown: no SLURM GPU variable (SLURM_GPUS_ON_NODE, "
            "SLURM_GPUS_PER_NODE, ...), SGE_HGR_gpu, CUDA_VISIBLE_DEVICES or nvidia-smi here; "
            + fix)


_OPTION_FIX = {
    "nodes": "leave --nodes out to use every node of the allocation, or give 1 or more",
    "gpus_per_node": "every worker needs a GPU; leave --gpus-per-node out to count the "
                     "allocation's GPUs, or give 1 or more (for CPU-only work use "
                     "distributed.LocalCluster or dask-jobqueue)",
}


def detect_allocation(
    env: Mapping[str, str] | None = None,
    *,
    nodes: int | None = None,
    gpus_per_node: int | None = None,
    probe_gpus: Callable[[], int | None] = count_nvidia_smi_gpus,
) -> Allocation:
    """Read the allocation from the batch system's environment.

    GPUs per node, first found: ``gpus_per_node``; SLURM's variables
    (:data:`~hpcgpu.schedulers.slurm.environment.SLURM_GPU_VARIABLES`, as sbatch, salloc and srun set them); SGE's
    ``SGE_HGR_gpu``; ``CUDA_VISIBLE_DEVICES``; ``nvidia-smi -L`` (not in salloc's shell,
    which runs on the login node).

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
    ValueError: gpus_per_node is unknown: no SLURM GPU variable (SLURM_GPUS_ON_NODE, \
SLURM_GPUS_PER_NODE, ...), SGE_HGR_gpu, CUDA_VISIBLE_DEVICES or nvidia-smi here; pass \
--gpus-per-node N (e.g. --gpus-per-node 4)
    """
    env = os.environ if env is None else env
    scheduler = detect(env)
    hosts, found_nodes, cpus = scheduler.hosts_and_cpus(env) if scheduler else ([], 1, None)
    for name, value in (("nodes", nodes), ("gpus_per_node", gpus_per_node)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name}={value!r} must be a whole number of at least 1: "
                             f"{_OPTION_FIX[name]}")
    gpus = gpus_per_node or _gpus_from_env(env, scheduler)
    if not gpus and not (scheduler and scheduler.gpus_unknowable(env)):
        gpus = probe_gpus()
    if not gpus:
        raise ValueError(_unknown_gpus(env, scheduler))
    return Allocation(
        scheduler=scheduler.name if scheduler else None,
        job_id=env.get(scheduler.job_id_variable) if scheduler else None,
        nodes=nodes or found_nodes or 1,
        gpus_per_node=gpus,
        cpus_per_node=cpus or os.cpu_count() or 1,
        hosts=tuple(hosts),
        **({} if gpus_per_node or nodes or not scheduler else scheduler.tasks(env)),
    )
