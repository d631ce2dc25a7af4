"""SLURM: ``#SBATCH`` directives, ``sbatch``/``scancel``/``squeue``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from hpcgpu.dialects.base import Dialect
from hpcgpu.resources import GPUJobShape
from hpcgpu.units import format_hms, format_memory

__all__ = ["SlurmDialect", "SLURM_MEMORY_UNITS"]

SLURM_MEMORY_UNITS = (("T", 2**40), ("G", 2**30), ("M", 2**20))


@dataclass(frozen=True)
class SlurmDialect(Dialect):
    """SLURM directives.

    Parameters
    ----------
    gpu_directive : {"gpus-per-node", "gres"}
        ``--gpus-per-node=[type:]G`` (default) or ``--gres=gpu[:type]:G`` for sites that
        only configure GRES.
    memory_directive : {"mem", "mem-per-gpu"}
        ``--mem`` per node (default) or ``--mem-per-gpu``; never both (dask-jobqueue#698).

    Examples
    --------
    >>> from hpcgpu.resources import GPUJobShape
    >>> shape = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=8,
    ...                            memory_per_gpu="60GiB", gpu_type="h100")
    >>> for line in SlurmDialect(gpu_directive="gres").directives(shape, "logs"):
    ...     print(line)
    #SBATCH --job-name=hpcgpu
    #SBATCH --nodes=2
    #SBATCH --ntasks-per-node=4
    #SBATCH --gres=gpu:h100:4
    #SBATCH --cpus-per-task=8
    #SBATCH --mem=240G
    #SBATCH --time=01:00:00
    #SBATCH --output=logs/%x-%j.out
    #SBATCH --error=logs/%x-%j.err
    """

    name: ClassVar[str] = "slurm"
    prefix: ClassVar[str] = "#SBATCH"
    submit_executable: ClassVar[str] = "sbatch"
    cancel_executable: ClassVar[str] = "scancel"
    default_launcher: ClassVar[str] = "srun"
    job_id_variable: ClassVar[str] = "SLURM_JOB_ID"
    job_id_pattern: ClassVar[str] = r"^\s*(\d+)"

    gpu_directive: Literal["gpus-per-node", "gres"] = "gpus-per-node"
    memory_directive: Literal["mem", "mem-per-gpu"] = "mem"

    def __post_init__(self) -> None:
        if self.gpu_directive not in ("gpus-per-node", "gres"):
            raise ValueError(
                f"gpu_directive={self.gpu_directive!r}: use 'gpus-per-node' or 'gres'"
            )
        if self.memory_directive not in ("mem", "mem-per-gpu"):
            raise ValueError(
                f"memory_directive={self.memory_directive!r}: use 'mem' or 'mem-per-gpu'"
            )

    def directives(self, shape: GPUJobShape, log_directory: str) -> list[str]:
        self.validate(shape)
        typed = f"{shape.gpu_type}:" if shape.gpu_type else ""
        gpus = (
            f"--gpus-per-node={typed}{shape.gpus_per_node}"
            if self.gpu_directive == "gpus-per-node"
            else f"--gres=gpu:{typed}{shape.gpus_per_node}"
        )
        lines = [
            f"--job-name={shape.job_name}",
            f"--nodes={shape.nodes}",
            f"--ntasks-per-node={shape.gpus_per_node}",
            gpus,
            f"--cpus-per-task={shape.cpus_per_gpu}",
        ]
        if shape.node_memory is not None:
            if self.memory_directive == "mem-per-gpu":
                lines.append(f"--mem-per-gpu={format_memory(shape.gpu_memory, SLURM_MEMORY_UNITS)}")
            else:
                lines.append(f"--mem={format_memory(shape.node_memory, SLURM_MEMORY_UNITS)}")
        lines.append(f"--time={format_hms(shape.walltime, days=True)}")
        if shape.queue:
            lines.append(f"--partition={shape.queue}")
        if shape.account:
            lines.append(f"--account={shape.account}")
        if shape.exclusive:
            lines.append("--exclusive")
        lines += [f"--output={log_directory}/%x-%j.out", f"--error={log_directory}/%x-%j.err"]
        return [f"{self.prefix} {line}" for line in lines]

    def submit_argv(self, script_path: str) -> list[str]:
        return ["sbatch", "--parsable", script_path]

    def check_argv(self, script_path: str) -> list[str]:
        return ["sbatch", "--test-only", script_path]
