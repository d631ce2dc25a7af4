"""Where a worker process stands: its node, its node-local rank, its GPU and its name.

Pure functions of the process environment, so they are tested without a launcher.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Any, Mapping

from hpcgpu.launchers.base import first_int
from hpcgpu.launchers import LOCAL_RANK_VARIABLES, LOCAL_SIZE_VARIABLES, NODE_VARIABLES, RANK_VARIABLES
from hpcgpu.schedulers.registry import schedulers

__all__ = ["Placement", "placement_from_env", "node_placements", "job_id_from_env",
           "visible_devices", "physical_gpu", "shared_gpu_error"]


def __getattr__(name: str) -> Any:
    """``JOB_ID_VARIABLES``: every registered scheduler's job id variable, for the default
    worker name (read from the registry)."""
    if name == "JOB_ID_VARIABLES":
        return tuple(s.job_id_variable for s in schedulers())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# hpcgpu's own first: where a launcher sets none (flux run), the job script sets it
_LOCAL_SIZE_VARIABLES = ("HPCGPU_LOCAL_SIZE", *LOCAL_SIZE_VARIABLES)


@dataclass(frozen=True)
class Placement:
    """One worker's place in its job.

    Attributes
    ----------
    node : int
        Index of the node within the job (0 for the first).
    local_rank : int
        Index of the worker on its node; also its GPU slot.
    gpu : str or None
        What this process puts in ``CUDA_VISIBLE_DEVICES`` (an index or a UUID), or None
        when nothing tells it which GPU is its own.
    name : str
        ``<prefix>-<node>-<local_rank>``.
    """

    node: int
    local_rank: int
    gpu: str | None
    name: str


def placement_from_env(prefix: str | None, env: Mapping[str, str] | None = None) -> Placement:
    """Work out this process's placement from the launcher's environment.

    The GPU: a single entry in ``CUDA_VISIBLE_DEVICES`` (the launcher bound one GPU to
    the task) is kept; several entries (the job's GPUs, not bound per task) are indexed by
    the local rank; none is the local rank itself.

    Examples
    --------
    >>> env = {"SLURM_JOB_ID": "77", "SLURM_NODEID": "1", "SLURM_LOCALID": "2",
    ...        "CUDA_VISIBLE_DEVICES": "2"}
    >>> placement_from_env(None, env)
    Placement(node=1, local_rank=2, gpu='2', name='77-1-2')
    >>> env = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_LOCAL_RANK": "1",
    ...        "OMPI_COMM_WORLD_LOCAL_SIZE": "4", "CUDA_VISIBLE_DEVICES": "0,1,2,3"}
    >>> placement_from_env("job", env)
    Placement(node=1, local_rank=1, gpu='1', name='job-1-1')
    """
    env = os.environ if env is None else env
    local = first_int(env, ("HPCGPU_LOCAL_RANK",) + LOCAL_RANK_VARIABLES) or 0
    node = _node_index(env)
    visible = visible_devices(env)
    local_size = first_int(env, _LOCAL_SIZE_VARIABLES)
    if len(visible) == 1:
        gpu: str | None = visible[0]
    elif visible:
        gpu = _own_entry(visible, local, local_size, env)
    elif local_size and local_size > 1 and (count := _node_gpu_count()) is not None:
        # no CUDA_VISIBLE_DEVICES (mpirun outside a batch job): every GPU of the node
        gpu = _own_entry([str(i) for i in range(count)], local, local_size, env)
    else:
        gpu = str(local)
    prefix = _prefix(prefix, env)
    return Placement(node=node, local_rank=local, gpu=gpu, name=f"{prefix}-{node}-{local}")


def _own_entry(visible: list[str], local: int, local_size: int | None,
               env: Mapping[str, str]) -> str:
    """Entry ``local`` of ``visible``; more ranks on the node than GPUs would share one."""
    ranks = max(local + 1, local_size or 0)
    if ranks > len(visible):
        listed = (f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']!r} lists"
                  if env.get("CUDA_VISIBLE_DEVICES") else "nvidia-smi -L lists")
        raise ValueError(
            f"{ranks} workers on this node but {listed} {len(visible)} GPU(s): two workers would "
            f"share a GPU. Start at most {len(visible)} task(s) per node (e.g. mpirun -n "
            f"<nodes x {len(visible)}> --map-by ppr:{len(visible)}:node), or ask the batch "
            "system for more GPUs per node")
    return visible[local]


def _node_gpu_count() -> int | None:
    """GPUs of this node (``nvidia-smi -L``), None where there is no NVIDIA driver."""
    from hpcgpu.worker.gpuinfo import count_nvidia_smi_gpus

    return count_nvidia_smi_gpus()


def node_placements(prefix: str | None, gpus: int | str,
                    env: Mapping[str, str] | None = None) -> list[Placement]:
    """The placements of all ``gpus`` workers that one process per node starts.

    The launcher gave this task every GPU of its node: worker ``i`` takes the ``i``-th
    entry of ``CUDA_VISIBLE_DEVICES`` (or GPU ``i`` where it is unset). Fewer entries than
    ``gpus`` would put two workers on one GPU, so that is refused. ``gpus="all"``: one
    worker per entry (nodes of one job that have different GPU counts).

    Examples
    --------
    >>> env = {"SLURM_JOB_ID": "77", "SLURM_NODEID": "1", "SLURM_LOCALID": "0",
    ...        "CUDA_VISIBLE_DEVICES": "4,5"}
    >>> [(p.name, p.gpu) for p in node_placements(None, 2, env)]
    [('77-1-0', '4'), ('77-1-1', '5')]
    >>> [p.gpu for p in node_placements("job", "all", {"CUDA_VISIBLE_DEVICES": "1,3,0"})]
    ['1', '3', '0']
    >>> node_placements("job", 4, {"CUDA_VISIBLE_DEVICES": "0"})
    Traceback (most recent call last):
    ...
    ValueError: gpus_per_node=4 but CUDA_VISIBLE_DEVICES='0' lists 1 GPU(s): give this task all GPUs of its node, or start one task per GPU
    """
    env = os.environ if env is None else env
    visible = visible_devices(env)
    if gpus == "all":
        if not visible:
            raise ValueError("--gpus-per-node all but CUDA_VISIBLE_DEVICES is empty: this task "
                             "was given no GPU; ask the batch system for GPUs on every node")
        gpus = len(visible)
    if not isinstance(gpus, int) or gpus < 1:
        raise ValueError(f"gpus_per_node={gpus!r} must be at least 1")
    if visible and len(visible) < gpus:
        raise ValueError(
            f"gpus_per_node={gpus} but CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r} "
            f"lists {len(visible)} GPU(s): give this task all GPUs of its node, or start one "
            "task per GPU")
    node, prefix = _node_index(env), _prefix(prefix, env)
    return [Placement(node=node, local_rank=i, gpu=visible[i] if visible else str(i),
                      name=f"{prefix}-{node}-{i}") for i in range(gpus)]


def _node_index(env: Mapping[str, str]) -> int:
    node = first_int(env, ("HPCGPU_NODE_RANK", *NODE_VARIABLES))
    if node is None:
        rank = first_int(env, RANK_VARIABLES)
        size = first_int(env, _LOCAL_SIZE_VARIABLES)
        node = rank // size if rank is not None and size else 0
    return node


def job_id_from_env(env: Mapping[str, str] | None = None, default: str = "") -> str:
    """The batch job id from the first of :data:`JOB_ID_VARIABLES` that is set, else ``default``.

    Examples
    --------
    >>> job_id_from_env({"PBS_JOBID": "7.pbs"}), job_id_from_env({}, "local")
    ('7.pbs', 'local')
    >>> job_id_from_env({"JOB_ID": "8", "SGE_TASK_ID": "3"}), job_id_from_env({"JOB_ID": "8",
    ...     "SGE_TASK_ID": "undefined"}), job_id_from_env({"LSB_JOBID": "5", "LSB_JOBINDEX": "2"})
    ('8.3', '8', '5[2]')
    """
    env = os.environ if env is None else env
    # an array element's own id where the scheduler gives it the array's (Grid Engine, LSF)
    return next((s.job_id(env) for s in schedulers() if env.get(s.job_id_variable)), default)


def visible_devices(env: Mapping[str, str]) -> list[str]:
    """The entries of ``CUDA_VISIBLE_DEVICES`` in ``env`` (none when it is unset or empty)."""
    return [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]


def _prefix(prefix: str | None, env: Mapping[str, str]) -> str:
    if prefix is None:
        prefix = job_id_from_env(env, socket.gethostname())
    return prefix


def physical_gpu(gpu: str | None, env: Mapping[str, str] | None = None) -> str | None:
    """The node's own id of ``gpu`` (an entry of ``CUDA_VISIBLE_DEVICES``), for telling
    whether two tasks of a node hold the same GPU.

    SLURM may renumber the devices a task sees from 0 (cgroup device constraint);
    ``SLURM_STEP_GPUS`` keeps the node's numbers, in the same order.

    Examples
    --------
    >>> physical_gpu("0", {"CUDA_VISIBLE_DEVICES": "0", "SLURM_STEP_GPUS": "3"})
    '3'
    >>> physical_gpu("1", {"CUDA_VISIBLE_DEVICES": "0,1"})
    '1'
    """
    env = os.environ if env is None else env
    visible = visible_devices(env)
    ids = [v for v in env.get("SLURM_STEP_GPUS", "").split(",") if v]
    if gpu in visible and len(ids) == len(visible):
        return ids[visible.index(gpu)]
    return gpu


def shared_gpu_error(ranks: list[tuple[int, tuple[int, str | None] | None, str | None]]) -> str | None:
    """The error to stop every rank with, or None: ``ranks`` holds, per rank, its
    ``(node, physical GPU)`` or the error its placement raised.

    Examples
    --------
    >>> shared_gpu_error([(0, (0, "0"), None), (1, (0, "1"), None), (2, (1, "0"), None)]) is None
    True
    >>> print(shared_gpu_error([(0, (0, "0"), None), (1, (0, "0"), None)]))
    ... # doctest: +ELLIPSIS
    ranks 0 and 1 would share GPU 0 of node 0 (...): start them with srun --mpi=pmix, or ...
    """
    for rank, _, error in ranks:
        if error:
            return f"rank {rank}: {error}"
    seen: dict[tuple, int] = {}
    for rank, key, _ in ranks:
        if key is None or key[1] is None:
            continue
        if key in seen:
            return (f"ranks {seen[key]} and {rank} would share GPU {key[1]} of node {key[0]} "
                    "(each task sees CUDA_VISIBLE_DEVICES with one GPU, the same one): start "
                    "them with srun --mpi=pmix, or give mpirun's daemons the node's GPUs "
                    "(OMPI_MCA_plm_slurm_args=--gpus-per-node=<GPUs per node> mpirun ...), or "
                    "ask the batch system for --gpus-per-node instead of --gpus-per-task")
        seen[key] = rank
    return None


def shared_gpu_workers(workers: Mapping[str, Mapping | None]) -> str | None:
    """The error for workers that hold the same GPU of one host, or None.

    ``workers``: worker name -> what the worker preload recorded
    (``WorkerState.extra["hpcgpu"]``): ``hostname``, ``node`` (its index in the job) and
    ``uuid`` (a real GPU) or ``physical_gpu`` (the node's id of its GPU). For ranks that started without talking
    to each other (``GPURunner``), this is the first moment their GPUs can be compared.

    Examples
    --------
    >>> a = {"hostname": "n1", "node": 0, "uuid": None, "physical_gpu": "2"}
    >>> shared_gpu_workers({"j-0-0": a, "j-0-1": {**a, "physical_gpu": "3"}}) is None
    True
    >>> print(shared_gpu_workers({"j-0-0": a, "j-0-1": a}))  # doctest: +ELLIPSIS
    workers j-0-0 and j-0-1 share GPU 2 of host n1: ...
    """
    seen: dict[tuple, str] = {}
    for name in sorted(workers):
        info = workers[name] or {}
        gpu = info.get("uuid") or info.get("physical_gpu")
        if not gpu:
            continue
        # the node index too: SLURM's emulated nodes share one host name
        key = (info.get("hostname"), info.get("node"), gpu)
        if key in seen:
            return (f"workers {seen[key]} and {name} share GPU {gpu} of host {key[0]}: each task "
                    "sees the same GPU (srun -n 2 --gpus=1 gives both tasks the one GPU); ask "
                    "for a GPU per task (--gpus-per-task=1) or as many GPUs per node as tasks "
                    "(--gpus-per-node=N --ntasks-per-node=N)")
        seen[key] = name
    return None
