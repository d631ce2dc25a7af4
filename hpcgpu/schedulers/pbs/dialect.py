"""PBS Pro (and OpenPBS): ``#PBS`` directives with ``select`` chunks, ``qsub``/``qdel``."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import ClassVar

from hpcgpu.schedulers.dialect import Dialect, JobStatus, optional_lines
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.jobspec.units import format_memory

__all__ = ["PBSDialect", "PBS_MEMORY_UNITS"]

PBS_MEMORY_UNITS = (("tb", 2**40), ("gb", 2**30), ("mb", 2**20), ("kb", 2**10))
_STATES = {"Q": "pending", "H": "pending", "W": "pending", "T": "pending", "S": "pending",
           "U": "pending", "B": "running", "R": "running", "E": "completing", "X": "completed",
           "F": "completed"}
#: Grid Engine's qsub answers so: both schedulers name their commands qsub, qstat, qdel.
_GRID_ENGINE_ANSWER = re.compile(r"^Your job(?:-array)? (\d+)")
#: PBS Pro's Exit_status for a job deleted by qdel while running (JOB_EXEC_KILL...).
_KILLED = {-1, 271, 265}


def _ended(code: int | None, comment: str) -> str:
    """How a finished job (``F``/``X``) ended, from its ``Exit_status`` and the server's comment.

    No exit status: it never ran (deleted while queued). ``... and terminated by <user>``:
    qdel'd while running, whatever exit status the mom recorded (OpenPBS 23.06 without cgroups
    records 0, PBS Pro usually 271).

    Examples
    --------
    >>> _ended(None, ""), _ended(0, "Job run at ... and terminated by root@pbs01"), _ended(3, "")
    ('cancelled', 'cancelled', 'failed')
    """
    if code is None or " and terminated by " in comment or code in _KILLED or code >= 256:
        return "cancelled"
    return "completed" if code == 0 else "failed"


@dataclass(frozen=True)
class PBSDialect(Dialect, name="pbs", prefix="#PBS", submit_executable="qsub",
                 cancel_executable="qdel", default_launcher="mpiexec"):
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

    host_file: ClassVar[str] = "PBS_NODEFILE"
    remote_shell: ClassVar[str] = "pbs_tmrsh"  # PBS's TM, for an MPI built without it

    job_id_pattern: ClassVar[str] = r"^\s*(\d+(?:\[\d*\])?(?:\.[\w.-]+)?)"
    #: qsub reads a directive's quotes; an account may hold spaces (test_directive_parse.py)
    quoted_fields: ClassVar[frozenset[str]] = frozenset({"account"})

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
        lines += optional_lines(shape, "-q {}", "-A {}", quoted=self.quoted_fields)
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
            code, comment = info.get("Exit_status"), str(info.get("comment", ""))
            if state == "completed":
                state = _ended(code, comment)
            hosts = [c.split("/")[0] for c in str(info.get("exec_host", "")).split("+") if c]
            jobs[job_id] = JobStatus(job_id, state, tuple(dict.fromkeys(hosts)),
                                     exit_code=code, reason=comment)
        return jobs

    def parse_job_id(self, output: str) -> str:
        """The job id qsub printed; Grid Engine's answer (its qsub first on PATH) is refused
        naming the job it took, since hpcgpu would then poll and cancel with Grid Engine's
        qstat and qdel.

        Examples
        --------
        >>> PBSDialect().parse_job_id("17[].pbs01\\n")
        '17[].pbs01'
        >>> PBSDialect().parse_job_id('Your job 77 ("STDIN") has been submitted\\n')
        Traceback (most recent call last):
        ...
        ValueError: the qsub first on PATH is Grid Engine's, not PBS's: it took the job as Grid \
Engine job 77 (delete it with Grid Engine's qdel 77); put PBS's commands first on PATH \
(PBS_EXEC/bin of /etc/pbs.conf, often /opt/pbs/bin)
        """
        other = _GRID_ENGINE_ANSWER.search(output)
        if other:
            number = other.group(1)
            raise ValueError(
                f"the qsub first on PATH is Grid Engine's, not PBS's: it took the job as Grid "
                f"Engine job {number} (delete it with Grid Engine's qdel {number}); put PBS's "
                "commands first on PATH (PBS_EXEC/bin of /etc/pbs.conf, often /opt/pbs/bin)")
        return super().parse_job_id(output)

    def launcher_for(self, shape: GPUJobShape) -> str:
        """``direct`` for one node, else ``mpiexec``.

        A one-node job needs no launcher, and PBS sites differ in their ``mpiexec`` (Cray
        PALS and MPICH take ``--ppn``, Open MPI refuses it and exits 1 at once).

        Examples
        --------
        >>> from hpcgpu.jobspec.resources import GPUJobShape
        >>> d = PBSDialect()
        >>> d.launcher_for(GPUJobShape.create(gpus_per_node=1)), d.launcher_for(
        ...     GPUJobShape.create(nodes=2, gpus_per_node=4))
        ('direct', 'mpiexec')
        """
        return "direct" if shape.nodes == 1 else self.default_launcher

    def error_log(self, job_name: str, job_id: str, log_directory: str) -> str:
        """``-j oe -o dir/``: PBS (OpenPBS and PBS Pro) writes ``dir/<job id>.OU``, the whole
        id, server and array index included (``12[3].server.OU``), not ``<name>.o<seq>``.

        Examples
        --------
        >>> PBSDialect().error_log("hpcgpu", "5.pbs01", "logs")
        'logs/5.pbs01.OU'
        """
        return f"{log_directory}/{job_id}.OU"
