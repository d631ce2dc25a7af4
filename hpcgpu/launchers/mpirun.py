"""Open MPI's ``mpirun``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from hpcgpu.launchers.base import Launcher

__all__ = ["Mpirun"]


@dataclass(frozen=True)
class Mpirun(Launcher):
    """``mpirun`` (Open MPI): binding is left to the worker, which takes its cores from the
    GPU's topology."""

    name: str = "mpirun"
    argv_template: ClassVar[str] = "mpirun -n {tasks} --map-by ppr:{per_host}:node --bind-to none"
    rank_variables: ClassVar[tuple[str, ...]] = ("OMPI_COMM_WORLD_RANK",)
    local_rank_variables: ClassVar[tuple[str, ...]] = ("OMPI_COMM_WORLD_LOCAL_RANK",)
    local_size_variables: ClassVar[tuple[str, ...]] = ("OMPI_COMM_WORLD_LOCAL_SIZE",)
    size_variables: ClassVar[tuple[str, ...]] = ("OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")

    def bound_task_environment(self, allocation: Any, env: dict[str, str]) -> dict[str, str]:
        """Under SLURM, mpirun's daemons are one srun task per node: Open MPI's
        ``plm_slurm_args`` gives them the node's GPUs, not one each."""
        if allocation.scheduler == "slurm":
            own = env.get("OMPI_MCA_plm_slurm_args", "")
            env["OMPI_MCA_plm_slurm_args"] = f"{own} --gpus-per-node={allocation.gpus_per_node}".strip()
        return env
