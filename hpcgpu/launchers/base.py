"""What every launcher is: how one job starts its GPU workers across its nodes.

A launcher is independent of the batch scheduler. By default it starts one task per node,
and that task (``python -m hpcgpu.worker --gpus-per-node G``) starts one nanny per GPU, as
dask-cuda's ``CUDAWorker`` does; with ``one_task_per="gpu"`` it starts one task per GPU.
Each launcher knows the environment variables in which its tasks find their rank, node-local
rank and the number of tasks.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Mapping

from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.schedulers.base import int_or_none

if TYPE_CHECKING:
    from hpcgpu.jobspec.worker_command import WorkerCommand

__all__ = ["ALL_VISIBLE", "NO_LAUNCHER", "Launcher", "first_int"]

#: ``--gpus-per-node`` value telling a worker task to take every GPU it sees.
ALL_VISIBLE = "all"
#: The launcher of a job on one node, or outside any batch system: none, the command itself.
NO_LAUNCHER = "direct"


def first_int(env: Mapping[str, str], names: tuple[str, ...]) -> int | None:
    """The first of ``names`` in ``env`` that holds a whole number (``4(x2)`` -> 4).

    >>> first_int({"A": "x", "B": "4(x2)"}, ("A", "B"))
    4
    """
    return next((n for n in (int_or_none(env.get(name)) for name in names) if n is not None), None)


@dataclass(frozen=True)
class Launcher:
    """One way of starting the GPU workers of a job.

    Attributes
    ----------
    name : str
        ``srun``, ``mpirun``, ``mpiexec``, ``jsrun`` or ``direct`` (a registered name).
    gpu_binding : {"gpus-per-task", "gpu-bind", "none"}
        srun with ``one_task_per="gpu"`` only: ``--gpus-per-task=1`` (default),
        ``--gpu-bind=single:1`` for sites that refuse per-task GPU requests, or nothing (the
        worker then picks its GPU by local rank).
    multi_node : bool
        Whether the launcher can span nodes (``direct`` cannot).
    one_task_per : {"node", "gpu"}
        ``node`` (default): one task per node, which starts a nanny and a worker process per
        GPU of its node. ``gpu``: one task (one nanny) per GPU.
    """

    name: str
    gpu_binding: str = "gpus-per-task"
    multi_node: bool = True
    one_task_per: str = "node"

    #: Variables that hold a task's global rank, in the order the worker reads them.
    rank_variables: ClassVar[tuple[str, ...]] = ()
    #: Variables that hold a task's node-local rank.
    local_rank_variables: ClassVar[tuple[str, ...]] = ()
    #: Variables that hold the number of its tasks on this node.
    local_size_variables: ClassVar[tuple[str, ...]] = ()
    #: Variables that hold the index of this task's node in the job.
    node_variables: ClassVar[tuple[str, ...]] = ()
    #: Variables that hold the number of tasks the launcher started.
    size_variables: ClassVar[tuple[str, ...]] = ()
    #: Whether it starts tasks at all (``direct`` runs the worker command itself).
    starts_tasks: ClassVar[bool] = True
    #: Whether every task gets the starting process's whole environment (where
    #: :meth:`environment_refused` does not say otherwise).
    passes_environment: ClassVar[bool] = False
    #: The words of :meth:`task_argv`, with ``{tasks}``, ``{per_host}``, ``{nodes}``, ``{gpus}``
    #: and ``{cpus}`` in them; empty: no command before the worker's.
    argv_template: ClassVar[str] = ""

    def failure_hint(self, output: str) -> str:
        """What to do where this launcher's own ``output`` shows a known misfit ("" if none)."""
        return ""

    def validate(self, shape: GPUJobShape,
                 multi_node: tuple[str, ...] = ("srun", "mpirun", "mpiexec", "jsrun")) -> None:
        """Raise ``ValueError`` if this launcher cannot start ``shape``; ``multi_node``: the
        launchers to suggest instead (the batch scheduler's own)."""
        if not self.multi_node and shape.nodes > 1:
            names = " or ".join(repr(name) for name in multi_node)
            raise ValueError(
                f"launcher={self.name!r} starts workers on one node only, but nodes={shape.nodes}: "
                f"use launcher={names}, or nodes=1"
            )

    def worker(self, worker: "WorkerCommand", shape: GPUJobShape) -> "WorkerCommand":
        """``worker`` as this launcher's tasks run it: told the launcher and, with one task
        per node, how many GPU workers to start."""
        gpus = shape.gpus_per_node if self.one_task_per == "node" else None
        return dataclasses.replace(worker, launcher=self.name, gpus_per_node=gpus)

    def prefix(self, shape: GPUJobShape) -> list[str]:
        """The argv that goes before the worker command (empty for ``direct``)."""
        self.validate(shape)
        if self.one_task_per == "node":
            return self.task_argv(shape.nodes, 1, shape.gpus_per_node, shape.cpus_per_node)
        return self.task_argv(shape.total_gpus, shape.gpus_per_node, 1, shape.cpus_per_gpu)

    def task_argv(self, tasks: int, per_host: int, gpus: int, cpus: int) -> list[str]:
        """The launcher starting ``tasks`` tasks, ``per_host`` per node, each with ``gpus``
        GPUs and ``cpus`` cores: :attr:`argv_template` filled in.

        >>> from hpcgpu.launchers import get_launcher
        >>> " ".join(get_launcher("jsrun").task_argv(2, 1, 4, 32))
        'jsrun --nrs 2 --rs_per_host 1 --tasks_per_rs 1 --gpu_per_rs 4 --cpu_per_rs 32 --bind packed:32'
        """
        values = {"tasks": tasks, "per_host": per_host, "nodes": tasks // per_host, "gpus": gpus,
                  "cpus": cpus}
        return [word.format(**values) for word in self.argv_template.split()]

    def across_hosts(self, host_file: str, remote_shell: str | None) -> list[str]:
        """The words this launcher needs to start tasks on every host of a job whose
        scheduler it may not be able to ask (:attr:`Dialect.host_file
        <hpcgpu.schedulers.dialect.Dialect.host_file>`): ``host_file`` names them,
        ``remote_shell`` starts its daemons there. None needed by default."""
        return []

    def task_size(self, env: Mapping[str, str]) -> int | None:
        """How many tasks this launcher started, where ``env`` is one of them."""
        return first_int(env, self.size_variables)

    def environment_refused(self, env: Mapping[str, str]) -> str | None:
        """Why, in ``env``, this launcher would not pass its environment to the tasks."""
        return None

    def allocation_step(self, allocation: Any) -> tuple[list[str], Any] | None:
        """(prefix, the worker's ``--gpus-per-node``) that fit ``allocation`` exactly, where
        this launcher belongs to its batch system; None: use :meth:`prefix`."""
        return None

    def bound_task_environment(self, allocation: Any, env: dict[str, str]) -> dict[str, str]:
        """``env`` for this launcher's daemons where the job binds GPUs to tasks."""
        return env
