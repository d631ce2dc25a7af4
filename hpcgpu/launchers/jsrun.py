"""IBM's ``jsrun`` (LSF CORAL systems): resource sets of GPUs and cores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpcgpu.launchers.base import Launcher

__all__ = ["Jsrun"]


@dataclass(frozen=True)
class Jsrun(Launcher):
    """``jsrun`` with one resource set per task.

    >>> " ".join(Jsrun().task_argv(2, 1, 4, 32))
    'jsrun --nrs 2 --rs_per_host 1 --tasks_per_rs 1 --gpu_per_rs 4 --cpu_per_rs 32 --bind packed:32'
    """

    name: str = "jsrun"
    rank_variables: ClassVar[tuple[str, ...]] = ("JSM_NAMESPACE_RANK",)
    local_rank_variables: ClassVar[tuple[str, ...]] = ("JSM_NAMESPACE_LOCAL_RANK",)
    local_size_variables: ClassVar[tuple[str, ...]] = ("JSM_NAMESPACE_LOCAL_SIZE",)
    size_variables: ClassVar[tuple[str, ...]] = ("JSM_NAMESPACE_SIZE",)

    def task_argv(self, tasks: int, per_host: int, gpus: int, cpus: int) -> list[str]:
        return ["jsrun", "--nrs", str(tasks), "--rs_per_host", str(per_host), "--tasks_per_rs", "1",
                "--gpu_per_rs", str(gpus), "--cpu_per_rs", str(cpus), "--bind", f"packed:{cpus}"]
