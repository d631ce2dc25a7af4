"""Flux's ``flux run``: tasks of a job in the Flux instance of the batch job."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpcgpu.launchers.base import Launcher

__all__ = ["FluxRun"]


@dataclass(frozen=True)
class FluxRun(Launcher):
    """``flux run -N nodes -n tasks -c cores -g gpus``: Flux binds each task's GPUs
    (``CUDA_VISIBLE_DEVICES``); ``HPCGPU_LOCAL_SIZE`` tells each task its node (Flux sets no
    tasks-per-node variable; its task mapping is block).

    >>> " ".join(FluxRun().task_argv(2, 1, 4, 32))
    'flux run --nodes=2 --ntasks=2 --cores-per-task=32 --gpus-per-task=4 --env=HPCGPU_LOCAL_SIZE=1'
    """

    name: str = "flux"
    rank_variables: ClassVar[tuple[str, ...]] = ("FLUX_TASK_RANK",)
    local_rank_variables: ClassVar[tuple[str, ...]] = ("FLUX_TASK_LOCAL_ID",)
    #: unset in a batch script (Flux's initial program), set in each task of flux run
    size_variables: ClassVar[tuple[str, ...]] = ("FLUX_JOB_SIZE",)

    def task_argv(self, tasks: int, per_host: int, gpus: int, cpus: int) -> list[str]:
        return ["flux", "run", f"--nodes={tasks // per_host}", f"--ntasks={tasks}",
                f"--cores-per-task={cpus}", f"--gpus-per-task={gpus}",
                f"--env=HPCGPU_LOCAL_SIZE={per_host}"]
