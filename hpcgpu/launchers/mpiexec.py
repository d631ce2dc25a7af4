"""``mpiexec`` of MPICH, Cray PALS and Intel MPI (``--ppn``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpcgpu.launchers.base import Launcher

__all__ = ["Mpiexec"]


@dataclass(frozen=True)
class Mpiexec(Launcher):
    """``mpiexec -n N --ppn P``.

    >>> " ".join(Mpiexec().task_argv(2, 1, 4, 32))
    'mpiexec -n 2 --ppn 1'
    """

    name: str = "mpiexec"
    rank_variables: ClassVar[tuple[str, ...]] = ("PMI_RANK", "PALS_RANKID", "PMIX_RANK")
    local_rank_variables: ClassVar[tuple[str, ...]] = ("PMI_LOCAL_RANK", "PALS_LOCAL_RANKID",
                                                       "MPI_LOCALRANKID")
    local_size_variables: ClassVar[tuple[str, ...]] = ("PMI_LOCAL_SIZE", "PALS_LOCAL_SIZE",
                                                       "MPI_LOCALNRANKS")
    size_variables: ClassVar[tuple[str, ...]] = ("PMI_SIZE", "PALS_SIZE")

    def task_argv(self, tasks: int, per_host: int, gpus: int, cpus: int) -> list[str]:
        return ["mpiexec", "-n", str(tasks), "--ppn", str(per_host)]
