"""Launchers: how one job starts one worker process per GPU across its nodes.

A launcher is independent of the scheduler dialect. It renders the command prefix
that starts ``nodes * gpus_per_node`` tasks, ``gpus_per_node`` per node, and knows
the environment variables in which each task finds its rank and node-local rank.

Examples
--------
>>> from hpcgpu.resources import GPUJobShape
>>> shape = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=8)
>>> " ".join(get_launcher("srun").prefix(shape))
'srun --nodes=2 --ntasks-per-node=4 --cpus-per-task=8 --gpus-per-task=1 --kill-on-bad-exit=1'
>>> " ".join(get_launcher("mpirun").prefix(shape))
'mpirun -n 8 --map-by ppr:4:node --bind-to none'
>>> " ".join(get_launcher("mpiexec").prefix(shape))
'mpiexec -n 8 --ppn 4'
>>> " ".join(get_launcher("jsrun").prefix(shape))
'jsrun --nrs 8 --rs_per_host 4 --tasks_per_rs 1 --gpu_per_rs 1 --cpu_per_rs 8 --bind packed:8'
"""

from __future__ import annotations

from dataclasses import dataclass

from hpcgpu.resources import GPUJobShape

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
    """One way of starting a task per GPU.

    Attributes
    ----------
    name : str
        ``srun``, ``mpirun``, ``mpiexec``, ``jsrun`` or ``direct``.
    gpu_binding : {"gpus-per-task", "gpu-bind", "none"}
        srun only: ``--gpus-per-task=1`` (default), ``--gpu-bind=single:1`` for sites that
        refuse per-task GPU requests, or nothing (the worker then picks its GPU by local rank).
    multi_node : bool
        Whether the launcher can span nodes (``direct`` cannot).
    """

    name: str
    gpu_binding: str = "gpus-per-task"
    multi_node: bool = True

    def validate(self, shape: GPUJobShape) -> None:
        """Raise ``ValueError`` if this launcher cannot start ``shape``."""
        if not self.multi_node and shape.nodes > 1:
            raise ValueError(
                f"launcher={self.name!r} starts workers on one node only, but nodes={shape.nodes}: "
                "use launcher='srun', 'mpirun', 'mpiexec' or 'jsrun', or nodes=1"
            )

    def prefix(self, shape: GPUJobShape) -> list[str]:
        """The argv that goes before the worker command (empty for ``direct``)."""
        self.validate(shape)
        n, g, c = shape.total_gpus, shape.gpus_per_node, shape.cpus_per_gpu
        if self.name == "srun":
            argv = ["srun", f"--nodes={shape.nodes}", f"--ntasks-per-node={g}",
                    f"--cpus-per-task={c}"]
            if self.gpu_binding == "gpus-per-task":
                argv.append("--gpus-per-task=1")
            elif self.gpu_binding == "gpu-bind":
                argv.append("--gpu-bind=single:1")
            return argv + ["--kill-on-bad-exit=1"]
        if self.name == "mpirun":
            # Binding is left to the worker, which takes its cores from the GPU's topology.
            return ["mpirun", "-n", str(n), "--map-by", f"ppr:{g}:node", "--bind-to", "none"]
        if self.name == "mpiexec":
            return ["mpiexec", "-n", str(n), "--ppn", str(g)]
        if self.name == "jsrun":
            return ["jsrun", "--nrs", str(n), "--rs_per_host", str(g), "--tasks_per_rs", "1",
                    "--gpu_per_rs", "1", "--cpu_per_rs", str(c), "--bind", f"packed:{c}"]
        return []


LAUNCHERS: dict[str, Launcher] = {
    "srun": Launcher("srun"),
    "mpirun": Launcher("mpirun"),
    "mpiexec": Launcher("mpiexec"),
    "jsrun": Launcher("jsrun"),
    "direct": Launcher("direct", multi_node=False),
}


def get_launcher(name: str, gpu_binding: str = "gpus-per-task") -> Launcher:
    """Return the launcher called ``name``.

    Examples
    --------
    >>> get_launcher("aprun")
    Traceback (most recent call last):
    ...
    ValueError: launcher='aprun' is not supported: use one of srun, mpirun, mpiexec, jsrun, direct
    """
    if name not in LAUNCHERS:
        raise ValueError(f"launcher={name!r} is not supported: use one of {', '.join(LAUNCHERS)}")
    if gpu_binding not in ("gpus-per-task", "gpu-bind", "none"):
        raise ValueError(f"gpu_binding={gpu_binding!r}: use 'gpus-per-task', 'gpu-bind' or 'none'")
    if gpu_binding != "gpus-per-task":
        if name != "srun":
            raise ValueError(f"gpu_binding applies to launcher='srun' only, not {name!r}")
        return Launcher("srun", gpu_binding=gpu_binding)
    return LAUNCHERS[name]
