"""Where a worker process stands: its node, its node-local rank, its GPU and its name.

Pure functions of the process environment, so they are tested without a launcher.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from typing import Mapping

from hpcgpu.launchers import LOCAL_RANK_VARIABLES, RANK_VARIABLES

__all__ = ["Placement", "placement_from_env", "node_placements", "JOB_ID_VARIABLES", "job_id_from_env", "visible_devices"]

#: Job id variables of the four schedulers, for the default worker name.
JOB_ID_VARIABLES = ("SLURM_JOB_ID", "PBS_JOBID", "LSB_JOBID", "JOB_ID")
_LOCAL_SIZE_VARIABLES = (
    "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_LOCAL_SIZE",
    "PALS_LOCAL_SIZE", "MPI_LOCALNRANKS", "JSM_NAMESPACE_LOCAL_SIZE",
)


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


def _first_int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = env.get(name, "")
        # SLURM_NTASKS_PER_NODE can be "4" or "4(x2)"
        head = value.split("(")[0].split(",")[0]
        if head.isdigit():
            return int(head)
    return None


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
    local = _first_int(env, ("HPCGPU_LOCAL_RANK",) + LOCAL_RANK_VARIABLES) or 0
    node = _node_index(env)
    visible = visible_devices(env)
    if len(visible) == 1:
        gpu: str | None = visible[0]
    elif visible:
        gpu = visible[local % len(visible)]
    else:
        gpu = str(local)
    prefix = _prefix(prefix, env)
    return Placement(node=node, local_rank=local, gpu=gpu, name=f"{prefix}-{node}-{local}")


def node_placements(prefix: str | None, gpus: int,
                    env: Mapping[str, str] | None = None) -> list[Placement]:
    """The placements of all ``gpus`` workers that one process per node starts.

    The launcher gave this task every GPU of its node: worker ``i`` takes the ``i``-th
    entry of ``CUDA_VISIBLE_DEVICES`` (or GPU ``i`` where it is unset). Fewer entries than
    ``gpus`` would put two workers on one GPU, so that is refused.

    Examples
    --------
    >>> env = {"SLURM_JOB_ID": "77", "SLURM_NODEID": "1", "SLURM_LOCALID": "0",
    ...        "CUDA_VISIBLE_DEVICES": "4,5"}
    >>> [(p.name, p.gpu) for p in node_placements(None, 2, env)]
    [('77-1-0', '4'), ('77-1-1', '5')]
    >>> node_placements("job", 4, {"CUDA_VISIBLE_DEVICES": "0"})
    Traceback (most recent call last):
    ...
    ValueError: gpus_per_node=4 but CUDA_VISIBLE_DEVICES='0' lists 1 GPU(s): give this task all GPUs of its node, or start one task per GPU
    """
    env = os.environ if env is None else env
    if gpus < 1:
        raise ValueError(f"gpus_per_node={gpus!r} must be at least 1")
    visible = visible_devices(env)
    if visible and len(visible) < gpus:
        raise ValueError(
            f"gpus_per_node={gpus} but CUDA_VISIBLE_DEVICES={env.get('CUDA_VISIBLE_DEVICES')!r} "
            f"lists {len(visible)} GPU(s): give this task all GPUs of its node, or start one "
            "task per GPU")
    node, prefix = _node_index(env), _prefix(prefix, env)
    return [Placement(node=node, local_rank=i, gpu=visible[i] if visible else str(i),
                      name=f"{prefix}-{node}-{i}") for i in range(gpus)]


def _node_index(env: Mapping[str, str]) -> int:
    node = _first_int(env, ("HPCGPU_NODE_RANK", "SLURM_NODEID"))
    if node is None:
        rank = _first_int(env, RANK_VARIABLES)
        size = _first_int(env, _LOCAL_SIZE_VARIABLES)
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
    job_id = next((env[v] for v in JOB_ID_VARIABLES if env.get(v)), default)
    # Grid Engine and LSF give every element of an array the array's id: add the index.
    if env.get("JOB_ID") == job_id and str(env.get("SGE_TASK_ID", "")).isdigit():
        return f"{job_id}.{env['SGE_TASK_ID']}"
    if env.get("LSB_JOBID") == job_id and env.get("LSB_JOBINDEX", "0") not in ("", "0"):
        return f"{job_id}[{env['LSB_JOBINDEX']}]"
    return job_id


def visible_devices(env: Mapping[str, str]) -> list[str]:
    """The entries of ``CUDA_VISIBLE_DEVICES`` in ``env`` (none when it is unset or empty)."""
    return [v.strip() for v in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]


def _prefix(prefix: str | None, env: Mapping[str, str]) -> str:
    if prefix is None:
        prefix = job_id_from_env(env, socket.gethostname())
    return prefix
