"""IBM's ``jsrun`` (LSF CORAL systems): resource sets of GPUs and cores."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpcgpu.launchers.base import Launcher

__all__ = ["Jsrun"]


@dataclass(frozen=True)
class Jsrun(Launcher):
    """``jsrun`` with one resource set per task."""

    name: str = "jsrun"
    argv_template: ClassVar[str] = ("jsrun --nrs {tasks} --rs_per_host {per_host} --tasks_per_rs 1 "
                                    "--gpu_per_rs {gpus} --cpu_per_rs {cpus} --bind packed:{cpus}")
    rank_variables: ClassVar[tuple[str, ...]] = ("JSM_NAMESPACE_RANK",)
    local_rank_variables: ClassVar[tuple[str, ...]] = ("JSM_NAMESPACE_LOCAL_RANK",)
    local_size_variables: ClassVar[tuple[str, ...]] = ("JSM_NAMESPACE_LOCAL_SIZE",)
    size_variables: ClassVar[tuple[str, ...]] = ("JSM_NAMESPACE_SIZE",)
