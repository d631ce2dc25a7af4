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
    tasks-per-node variable; its task mapping is block)."""

    name: str = "flux"
    argv_template: ClassVar[str] = ("flux run --nodes={nodes} --ntasks={tasks} --cores-per-task={cpus} "
                                    "--gpus-per-task={gpus} --env=HPCGPU_LOCAL_SIZE={per_host}")
    rank_variables: ClassVar[tuple[str, ...]] = ("FLUX_TASK_RANK",)
    local_rank_variables: ClassVar[tuple[str, ...]] = ("FLUX_TASK_LOCAL_ID",)
    #: unset in a batch script (Flux's initial program), set in each task of flux run
    size_variables: ClassVar[tuple[str, ...]] = ("FLUX_JOB_SIZE",)
