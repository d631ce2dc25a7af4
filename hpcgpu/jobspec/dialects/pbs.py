"""PBS Pro (and OpenPBS): ``#PBS`` directives with ``select`` chunks, ``qsub``/``qdel``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import ClassVar

from hpcgpu.jobspec.dialects.base import Dialect, JobStatus, optional_lines
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.jobspec.units import format_memory

__all__ = ["PBSDialect", "PBS_MEMORY_UNITS"]

PBS_MEMORY_UNITS = (("tb", 2**40), ("gb", 2**30), ("mb", 2**20), ("kb", 2**10))
_STATES = {"Q": "pending", "H": "pending", "W": "pending", "T": "pending", "S": "pending",
           "U": "pending", "B": "running", "R": "running", "E": "completing", "X": "completed",
           "F": "completed"}
#: PBS Pro's Exit_status for a job deleted by qdel while running (JOB_EXEC_KILL...).
_KILLED = {-1, 271, 265}


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
    >>> from hpcgpu.jobspec.resources import GPUJobShape
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
    job_id_pattern: ClassVar[str] = r"^\s*(\d+(?:\[\d*\])?(?:\.[\w.-]+)?)"

    gpu_resource: str = "ngpus"
    gpu_type_resource: str = "gpu_model"

    def _lines(self, shape: GPUJobShape, log_directory: str) -> list[str]:
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
            f"-l walltime={shape.walltime_hms}",
        ]
        lines += optional_lines(shape, "-q {}", "-A {}")
        lines += ["-j oe", f"-o {log_directory}/"]
        return lines

    def status_argv(self, job_ids: list[str]) -> list[str]:
        # -x: finished jobs too (job history), -F json: one machine-readable answer.
        return ["qstat", "-x", "-f", "-F", "json", *job_ids]

    def parse_status(self, output: str) -> dict[str, JobStatus]:
        """Parse ``qstat -x -f -F json``.

        Examples
        --------
        >>> out = ('{"Jobs": {"7.pbs": {"job_state": "R", "exec_host": "n1/0*4+n2/0*4"},'
        ...        ' "8.pbs": {"job_state": "F", "Exit_status": 2}}}')
        >>> s = PBSDialect().parse_status(out)
        >>> s["7.pbs"].nodes, s["8.pbs"].state, s["8.pbs"].exit_code
        (('n1', 'n2'), 'failed', 2)
        """
        try:
            data = json.loads(output or "{}")
        except json.JSONDecodeError:
            return {}
        jobs = {}
        for job_id, info in data.get("Jobs", {}).items():
            state = _STATES.get(info.get("job_state", ""), "unknown")
            code = info.get("Exit_status")
            if state == "completed" and code is not None and code != 0:
                state = "cancelled" if code in _KILLED or code >= 256 else "failed"
            hosts = [c.split("/")[0] for c in str(info.get("exec_host", "")).split("+") if c]
            jobs[job_id] = JobStatus(job_id, state, tuple(dict.fromkeys(hosts)),
                                     exit_code=code, reason=info.get("comment", ""))
        return jobs

    def error_log(self, job_name: str, job_id: str, log_directory: str) -> str:
        # -j oe -o dir/: PBS writes <name>.o<sequence number>
        # an array element 123[4].server writes <name>.o123.4
        sequence = re.sub(r"\[(\d+)\]", r".\1", job_id.split(".")[0])
        return f"{log_directory}/{job_name}.o{sequence}"
