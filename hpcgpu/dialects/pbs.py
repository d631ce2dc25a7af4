"""PBS Pro (and OpenPBS): ``#PBS`` directives with ``select`` chunks, ``qsub``/``qdel``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from hpcgpu.dialects.base import Dialect
from hpcgpu.resources import GPUJobShape
from hpcgpu.units import format_hms, format_memory

__all__ = ["PBSDialect", "PBS_MEMORY_UNITS"]

PBS_MEMORY_UNITS = (("tb", 2**40), ("gb", 2**30), ("mb", 2**20), ("kb", 2**10))


@dataclass(frozen=True)
class PBSDialect(Dialect):
    """PBS Pro directives: one ``select`` chunk per node, one MPI process per GPU.

    Parameters
    ----------
    gpu_resource : str
        The chunk resource that counts GPUs (``ngpus`` on PBS Pro; some sites use ``gpus``).
    gpu_type_resource : str
        The chunk resource that names a GPU model, used when the shape has a ``gpu_type``.

    Examples
    --------
    >>> from hpcgpu.resources import GPUJobShape
    >>> shape = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=8,
    ...                            memory_per_gpu="60GiB", queue="gpu", account="proj1")
    >>> for line in PBSDialect().directives(shape, "logs"):
    ...     print(line)
    #PBS -N hpcgpu
    #PBS -l select=2:ncpus=32:ngpus=4:mpiprocs=4:ompthreads=8:mem=240gb
    #PBS -l place=scatter
    #PBS -l walltime=01:00:00
    #PBS -q gpu
    #PBS -A proj1
    #PBS -j oe
    #PBS -o logs/
    """

    name: ClassVar[str] = "pbs"
    prefix: ClassVar[str] = "#PBS"
    submit_executable: ClassVar[str] = "qsub"
    cancel_executable: ClassVar[str] = "qdel"
    default_launcher: ClassVar[str] = "mpiexec"
    job_id_variable: ClassVar[str] = "PBS_JOBID"
    job_id_pattern: ClassVar[str] = r"^\s*(\d+(?:\[\d*\])?(?:\.[\w.-]+)?)"

    gpu_resource: str = "ngpus"
    gpu_type_resource: str = "gpu_model"

    def directives(self, shape: GPUJobShape, log_directory: str) -> list[str]:
        self.validate(shape)
        chunk = [
            f"select={shape.nodes}",
            f"ncpus={shape.cpus_per_node}",
            f"{self.gpu_resource}={shape.gpus_per_node}",
            f"mpiprocs={shape.gpus_per_node}",
            f"ompthreads={shape.cpus_per_gpu}",
        ]
        if shape.gpu_type:
            chunk.append(f"{self.gpu_type_resource}={shape.gpu_type}")
        if shape.node_memory is not None:
            chunk.append(f"mem={format_memory(shape.node_memory, PBS_MEMORY_UNITS)}")
        lines = [
            f"-N {shape.job_name}",
            f"-l {':'.join(chunk)}",
            f"-l place=scatter{':excl' if shape.exclusive else ''}",
            f"-l walltime={format_hms(shape.walltime)}",
        ]
        if shape.queue:
            lines.append(f"-q {shape.queue}")
        if shape.account:
            lines.append(f"-A {shape.account}")
        lines += ["-j oe", f"-o {log_directory}/"]
        return [f"{self.prefix} {line}" for line in lines]
