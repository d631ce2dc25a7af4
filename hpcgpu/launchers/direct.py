"""No launcher: the job's script runs the worker command itself, on one node."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpcgpu.launchers.base import NO_LAUNCHER, Launcher

__all__ = ["Direct"]


@dataclass(frozen=True)
class Direct(Launcher):
    """The worker command alone; one node only.

    >>> from hpcgpu.jobspec.resources import GPUJobShape
    >>> Direct().prefix(GPUJobShape.create(gpus_per_node=4))
    []
    """

    name: str = NO_LAUNCHER
    multi_node: bool = False
    starts_tasks: ClassVar[bool] = False
    passes_environment: ClassVar[bool] = True  # the tasks are this process's children
