"""What SLURM's environment says about GPUs, in sbatch's script, salloc's shell and srun's tasks.

Pure functions of the environment; tests/data/slurm-env/ holds real captures.
"""

from __future__ import annotations

from typing import Mapping

from hpcgpu.schedulers.base import int_or_none

__all__ = ["SLURM_GPU_VARIABLES", "slurm_gpus", "slurm_tasks", "in_salloc_shell"]


def _count(value: str | None) -> int | None:
    """A GPU count as SLURM writes it: ``2``, ``gpu:2``, ``h100:2``."""
    return int_or_none((value or "").split(",")[0].rsplit(":", 1)[-1])


def _min_cpus(value: str | None) -> int | None:
    """The smallest node of ``SLURM_JOB_CPUS_PER_NODE`` (``32``, ``2(x2)``, ``4,2(x3)``)."""
    counts = [int_or_none(part) for part in (value or "").split(",")]
    return min((c for c in counts if c), default=None)


def _ids(value: str | None) -> list[str]:
    """GPU ids in ``CUDA_VISIBLE_DEVICES`` (comma) or ``SGE_HGR_gpu`` (space) form."""
    return [v for v in (value or "").replace(",", " ").split() if v and v != "NoDevFiles"]


#: SLURM's GPU variables, in the order read (docs/batch.md lists where SLURM sets each)
SLURM_GPU_VARIABLES = ("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE", "SLURM_STEP_GPUS",
                       "SLURM_JOB_GPUS", "SLURM_GPUS_PER_TASK", "SLURM_TRES_PER_TASK", "SLURM_GPUS")


def _tres_gpus(value: str | None) -> int | None:
    """GPUs in a TRES list as ``SLURM_TRES_PER_TASK`` has it (SLURM 23.02 and later):
    ``cpu=2,gres/gpu=1``, ``gres/gpu:h100=2``.

    Examples
    --------
    >>> _tres_gpus("cpu=2,gres/gpu=1"), _tres_gpus("gres/gpu:h100=2"), _tres_gpus("cpu=4")
    (1, 2, None)
    """
    for item in (value or "").split(","):
        name, _, count = item.partition("=")
        if name.strip().startswith(("gres/gpu", "gres:gpu", "gpu")):
            return int_or_none(count) or _count(name)
    return None


def in_salloc_shell(env: Mapping[str, str]) -> bool:
    """Whether this is salloc's shell: a job, but not a node of it (no ``SLURM_CPUS_ON_NODE``)."""
    return bool(env.get("SLURM_JOB_ID")) and not env.get("SLURM_CPUS_ON_NODE")


def slurm_gpus(env: Mapping[str, str]) -> int | None:
    """GPUs per node from SLURM's variables: this node's count (batch script, srun), the
    per-node request (salloc, sbatch), GPU ids, then per-task or total requests spread
    over the nodes."""
    count = (int_or_none(env.get("SLURM_GPUS_ON_NODE")) or _count(env.get("SLURM_GPUS_PER_NODE"))
             or len(_ids(env.get("SLURM_STEP_GPUS"))) or len(_ids(env.get("SLURM_JOB_GPUS"))))
    if count:
        return count
    nodes = int_or_none(env.get("SLURM_JOB_NUM_NODES")) or int_or_none(env.get("SLURM_NNODES")) or 1
    per_task = _count(env.get("SLURM_GPUS_PER_TASK")) or _tres_gpus(env.get("SLURM_TRES_PER_TASK"))
    tasks = int_or_none(env.get("SLURM_NTASKS")) or int_or_none(env.get("SLURM_NPROCS"))
    if per_task and tasks:
        return per_task * -(-tasks // nodes)
    total = _count(env.get("SLURM_GPUS"))
    return -(-total // nodes) if total else None


def slurm_tasks(scheduler: str | None, env: Mapping[str, str]) -> dict:
    """SLURM's binding of GPUs to tasks, cores per task and total GPU count, as asked for."""
    if scheduler != "slurm":
        return {}
    per_task = _count(env.get("SLURM_GPUS_PER_TASK")) or _tres_gpus(env.get("SLURM_TRES_PER_TASK"))
    tasks = int_or_none(env.get("SLURM_NTASKS")) or int_or_none(env.get("SLURM_NPROCS"))
    return dict(gpus_per_task=per_task if per_task and tasks else None,
                tasks=tasks if per_task else None,
                cpus_per_task=int_or_none(env.get("SLURM_CPUS_PER_TASK")),
                total=_count(env.get("SLURM_GPUS")))
