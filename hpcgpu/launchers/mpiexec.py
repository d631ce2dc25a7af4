"""``mpiexec`` of MPICH, Cray PALS and Intel MPI (``--ppn``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpcgpu.launchers.base import Launcher

__all__ = ["Mpiexec"]


@dataclass(frozen=True)
class Mpiexec(Launcher):
    """``mpiexec -n N --ppn P``."""

    name: str = "mpiexec"
    argv_template: ClassVar[str] = "mpiexec -n {tasks} --ppn {per_host}"
    rank_variables: ClassVar[tuple[str, ...]] = ("PMI_RANK", "PALS_RANKID", "PMIX_RANK")
    local_rank_variables: ClassVar[tuple[str, ...]] = ("PMI_LOCAL_RANK", "PALS_LOCAL_RANKID",
                                                       "MPI_LOCALRANKID")
    local_size_variables: ClassVar[tuple[str, ...]] = ("PMI_LOCAL_SIZE", "PALS_LOCAL_SIZE",
                                                       "MPI_LOCALNRANKS")
    size_variables: ClassVar[tuple[str, ...]] = ("PMI_SIZE", "PALS_SIZE")

    def failure_hint(self, output: str) -> str:
        """Open MPI's ``mpiexec`` has no ``--ppn``; its ``mpirun`` is the launcher there.

        >>> Mpiexec().failure_hint('mpiexec: Error: unknown option "--ppn"')
        "this mpiexec is Open MPI's, which has no --ppn: use --launcher mpirun (launcher='mpirun' in cluster mode)"
        """
        if "--ppn" in output and "unknown option" in output:
            return ("this mpiexec is Open MPI's, which has no --ppn: use --launcher mpirun "
                    "(launcher='mpirun' in cluster mode)")
        return ""
