"""SLURM's ``srun``: tasks of a job step, their GPUs and cores from SLURM."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Mapping

from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.launchers.base import ALL_VISIBLE, Launcher

__all__ = ["Srun"]


@dataclass(frozen=True)
class Srun(Launcher):
    """``srun``: one task per node (all of the node's GPUs) or one per GPU (bound).

    >>> shape = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=8)
    >>> " ".join(Srun().prefix(shape))
    'srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --cpus-per-task=32 --kill-on-bad-exit=1'
    """

    name: str = "srun"
    rank_variables: ClassVar[tuple[str, ...]] = ("SLURM_PROCID",)
    local_rank_variables: ClassVar[tuple[str, ...]] = ("SLURM_LOCALID",)
    local_size_variables: ClassVar[tuple[str, ...]] = ("SLURM_NTASKS_PER_NODE",)  # "4(x2)"
    node_variables: ClassVar[tuple[str, ...]] = ("SLURM_NODEID",)
    size_variables: ClassVar[tuple[str, ...]] = ("SLURM_STEP_NUM_TASKS",)
    passes_environment: ClassVar[bool] = True

    def environment_refused(self, env: Mapping[str, str]) -> str | None:
        """sbatch --export=NONE (or a list) leaves srun's tasks without the environment."""
        export = env.get("SLURM_EXPORT_ENV", "ALL")
        if export.split(",")[0].upper() == "ALL":
            return None
        return f"srun passes no environment here (SLURM_EXPORT_ENV={export}, from sbatch --export)"

    def prefix(self, shape: GPUJobShape) -> list[str]:
        self.validate(shape)
        n = shape.nodes
        if self.one_task_per == "node":
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

    def task_size(self, env: Mapping[str, str]) -> int | None:
        # the batch script and the extern step are no tasks of srun's
        if env.get("SLURM_STEP_ID", "batch") in ("batch", "extern"):
            return None
        return super().task_size(env)

    def allocation_step(self, allocation: Any) -> tuple[list[str], Any] | None:
        """srun's options for the workers' step in a SLURM job, and the worker's
        ``--gpus-per-node`` ("all": every GPU it sees, where nodes differ)."""
        a = allocation
        if a.scheduler != "slurm":
            return None
        if a.gpus_per_task:
            argv = ["srun", f"--nodes={a.nodes}", f"--ntasks={a.tasks}",
                    f"--cpus-per-task={a.cpus_per_task or 1}", f"--gpus-per-task={a.gpus_per_task}"]
            return argv + ["--kill-on-bad-exit=1"], (a.gpus_per_task if a.gpus_per_task > 1 else None)
        # --ntasks: the job's SLURM_NTASKS would override the per-node count. Cores: what the
        # smallest node has (asking for more fails: "More processors requested than permitted").
        argv = ["srun", f"--nodes={a.nodes}", f"--ntasks={a.nodes}", "--ntasks-per-node=1",
                f"--cpus-per-task={a.cpus_per_node}"]
        if a.total is None:
            # a step gets no GPU unless the job asked for them in a form srun inherits
            # (--exclusive alone does not): ask for the node's GPUs
            argv.append(f"--gpus-per-node={a.gpus_per_node}")
        return argv + ["--kill-on-bad-exit=1"], (a.gpus_per_node if a.uniform else ALL_VISIBLE)
