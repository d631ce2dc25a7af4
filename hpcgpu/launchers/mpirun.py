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

    def across_hosts(self, host_file: str, remote_shell: str | None) -> list[str]:
        """Open MPI built without PBS's TM (Debian's, conda-forge's) finds no allocation in a
        PBS job and starts every task on the first host: the host file names the job's
        hosts, and the scheduler's remote shell starts the daemons there as the job's own
        processes (ssh, then rsh, where it is missing). With TM, Open MPI uses TM and the
        host file names the hosts it has anyway.

        >>> Mpirun().across_hosts('"$PBS_NODEFILE"', "pbs_tmrsh")
        ['--hostfile', '"$PBS_NODEFILE"', '--mca', 'plm_rsh_agent', 'pbs_tmrsh : ssh : rsh']
        """
        agent = ["--mca", "plm_rsh_agent", f"{remote_shell} : ssh : rsh"] if remote_shell else []
        return ["--hostfile", host_file, *agent]

    def bound_task_environment(self, allocation: Any, env: dict[str, str]) -> dict[str, str]:
        """Under SLURM, mpirun's daemons are one srun task per node: Open MPI's
        ``plm_slurm_args`` gives them the node's GPUs, not one each."""
        if allocation.scheduler == "slurm":
            own = env.get("OMPI_MCA_plm_slurm_args", "")
            env["OMPI_MCA_plm_slurm_args"] = f"{own} --gpus-per-node={allocation.gpus_per_node}".strip()
        return env
