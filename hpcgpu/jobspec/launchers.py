"""Launchers: how one job starts its GPU workers across its nodes.

A launcher is independent of the scheduler dialect. By default it starts one task per
node, and that task (``python -m hpcgpu.worker --gpus-per-node G``) starts one nanny per
GPU, each pinning its worker process to one GPU, as dask-cuda's ``CUDAWorker`` does: G + 1
interpreters per node instead of 2G. With ``one_task_per="gpu"`` it starts
``nodes * gpus_per_node`` tasks instead, for sites that bind GPUs to tasks (``srun
--gpus-per-task=1``, ``--gpu-bind``). It knows the environment variables in which each
task finds its rank and node-local rank.

Examples
--------
>>> from hpcgpu.jobspec.resources import GPUJobShape
>>> shape = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=8)
>>> " ".join(get_launcher("srun").prefix(shape))
'srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=32 --kill-on-bad-exit=1'
>>> " ".join(get_launcher("mpirun").prefix(shape))
'mpirun -n 2 --map-by ppr:1:node --bind-to none'
>>> " ".join(get_launcher("mpiexec").prefix(shape))
'mpiexec -n 2 --ppn 1'
>>> " ".join(get_launcher("jsrun").prefix(shape))
'jsrun --nrs 2 --rs_per_host 1 --tasks_per_rs 1 --gpu_per_rs 4 --cpu_per_rs 32 --bind packed:32'

One task per GPU:

>>> " ".join(get_launcher("srun", one_task_per="gpu").prefix(shape))
'srun --nodes=2 --ntasks-per-node=4 --cpus-per-task=8 --gpus-per-task=1 --kill-on-bad-exit=1'
>>> " ".join(get_launcher("mpirun", one_task_per="gpu").prefix(shape))
'mpirun -n 8 --map-by ppr:4:node --bind-to none'
>>> " ".join(get_launcher("mpiexec", one_task_per="gpu").prefix(shape))
'mpiexec -n 8 --ppn 4'
>>> " ".join(get_launcher("jsrun", one_task_per="gpu").prefix(shape))
'jsrun --nrs 8 --rs_per_host 4 --tasks_per_rs 1 --gpu_per_rs 1 --cpu_per_rs 8 --bind packed:8'
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hpcgpu.jobspec.resources import GPUJobShape

if TYPE_CHECKING:
    from hpcgpu.jobspec.worker_command import WorkerCommand

__all__ = ["Launcher", "LAUNCHERS", "get_launcher", "LOCAL_RANK_VARIABLES", "RANK_VARIABLES"]

#: Node-local rank variables, in the order the worker looks for them.
LOCAL_RANK_VARIABLES = (
    "SLURM_LOCALID",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "PMI_LOCAL_RANK",
    "PALS_LOCAL_RANKID",
    "MPI_LOCALRANKID",
    "JSM_NAMESPACE_LOCAL_RANK",
)
#: Global rank variables, in the order the worker looks for them.
RANK_VARIABLES = (
    "SLURM_PROCID",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "PALS_RANKID",
    "PMIX_RANK",
    "JSM_NAMESPACE_RANK",
)


@dataclass(frozen=True)
class Launcher:
    """One way of starting the GPU workers of a job.

    Attributes
    ----------
    name : str
        ``srun``, ``mpirun``, ``mpiexec``, ``jsrun`` or ``direct``.
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
        per_node = self.one_task_per == "node"
        if self.name == "srun":
            return self._srun(shape, per_node)
        if per_node:
            return _task_argv(self.name, shape.nodes, 1, shape.gpus_per_node, shape.cpus_per_node)
        return _task_argv(self.name, shape.total_gpus, shape.gpus_per_node, 1, shape.cpus_per_gpu)

    def _srun(self, shape: GPUJobShape, per_node: bool) -> list[str]:
        n = shape.nodes
        if per_node:
            # --ntasks: the job's SLURM_NTASKS (one per GPU) would override the per-node count.
            # No GPU option: a step gets all of the job's GPUs on its node.
            return ["srun", f"--nodes={n}", f"--ntasks={n}", "--ntasks-per-node=1",
                    f"--cpus-per-task={shape.cpus_per_node}", "--kill-on-bad-exit=1"]
        argv = ["srun", f"--nodes={n}", f"--ntasks-per-node={shape.gpus_per_node}",
                f"--cpus-per-task={shape.cpus_per_gpu}"]
        if self.gpu_binding == "gpus-per-task":
            argv.append("--gpus-per-task=1")
        elif self.gpu_binding == "gpu-bind":
            argv.append("--gpu-bind=single:1")
        return argv + ["--kill-on-bad-exit=1"]


def _task_argv(name: str, tasks: int, per_host: int, gpus: int, cpus: int) -> list[str]:
    """mpirun, mpiexec or jsrun starting ``tasks`` tasks, ``per_host`` per node, each with
    ``gpus`` GPUs and ``cpus`` cores (``[]`` for ``direct``)."""
    if name == "mpirun":
        # Binding is left to the worker, which takes its cores from the GPU's topology.
        return ["mpirun", "-n", str(tasks), "--map-by", f"ppr:{per_host}:node", "--bind-to", "none"]
    if name == "mpiexec":
        return ["mpiexec", "-n", str(tasks), "--ppn", str(per_host)]
    if name == "jsrun":
        return ["jsrun", "--nrs", str(tasks), "--rs_per_host", str(per_host), "--tasks_per_rs", "1",
                "--gpu_per_rs", str(gpus), "--cpu_per_rs", str(cpus), "--bind", f"packed:{cpus}"]
    return []


LAUNCHERS: dict[str, Launcher] = {
    "srun": Launcher("srun"),
    "mpirun": Launcher("mpirun"),
    "mpiexec": Launcher("mpiexec"),
    "jsrun": Launcher("jsrun"),
    "direct": Launcher("direct", multi_node=False),
}


def get_launcher(name: str, gpu_binding: str = "gpus-per-task",
                 one_task_per: str | None = None) -> Launcher:
    """Return the launcher called ``name``.

    ``one_task_per`` is ``node`` (the default) or ``gpu``; a ``gpu_binding`` other than the
    default implies ``gpu``.

    Examples
    --------
    >>> get_launcher("aprun")
    Traceback (most recent call last):
    ...
    ValueError: launcher='aprun' is not supported: use one of srun, mpirun, mpiexec, jsrun, direct
    >>> get_launcher("srun", gpu_binding="gpu-bind").one_task_per
    'gpu'
    >>> get_launcher("direct", one_task_per="gpu")
    Traceback (most recent call last):
    ...
    ValueError: one_task_per='gpu' needs a launcher that starts tasks (srun, mpirun, mpiexec, jsrun), not 'direct'
    """
    if name not in LAUNCHERS:
        raise ValueError(f"launcher={name!r} is not supported: use one of {', '.join(LAUNCHERS)}")
    if gpu_binding not in ("gpus-per-task", "gpu-bind", "none"):
        raise ValueError(f"gpu_binding={gpu_binding!r}: use 'gpus-per-task', 'gpu-bind' or 'none'")
    if one_task_per not in (None, "node", "gpu"):
        raise ValueError(f"one_task_per={one_task_per!r}: use 'node' (one task starts a worker "
                         "per GPU of its node) or 'gpu' (one task per GPU)")
    if gpu_binding != "gpus-per-task":
        if name != "srun":
            raise ValueError(f"gpu_binding applies to launcher='srun' only, not {name!r}")
        if one_task_per == "node":
            raise ValueError(f"gpu_binding={gpu_binding!r} binds a GPU to each task: use "
                             "one_task_per='gpu'")
        one_task_per = "gpu"
    if one_task_per == "gpu" and name == "direct":
        raise ValueError("one_task_per='gpu' needs a launcher that starts tasks (srun, mpirun, "
                         "mpiexec, jsrun), not 'direct'")
    return dataclasses.replace(LAUNCHERS[name], gpu_binding=gpu_binding,
                               one_task_per=one_task_per or "node")
