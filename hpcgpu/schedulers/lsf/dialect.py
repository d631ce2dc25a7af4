"""IBM Spectrum LSF: ``#BSUB`` directives, ``bsub < script``/``bkill``."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import ClassVar

from hpcgpu.schedulers.dialect import Dialect, JobStatus, host_names, optional_lines
from hpcgpu.jobspec.resources import GPUJobShape

__all__ = ["LSFDialect", "LSF_UNITS"]

LSF_UNITS = {"KB": 2**10, "MB": 2**20, "GB": 2**30, "TB": 2**40}
_STATES = {"PEND": "pending", "PSUSP": "pending", "WAIT": "pending", "PROV": "pending",
           "RUN": "running", "USUSP": "running", "SSUSP": "running", "DONE": "completed",
           "EXIT": "failed", "ZOMBI": "cancelled"}


@dataclass(frozen=True)
class LSFDialect(Dialect, name="lsf", prefix="#BSUB", submit_executable="bsub",
                 cancel_executable="bkill", default_launcher="jsrun"):
    """LSF directives: ``-n`` tasks, ``span[ptile=G]``, ``-gpu "num=G:..."``.

    Parameters
    ----------
    memory_unit : {"KB", "MB", "GB", "TB"}
        The site's ``LSF_UNIT_FOR_LIMITS`` (LSF's own default is KB; most sites set MB).
    gpu_mode : str
        The ``mode=`` of the ``-gpu`` request (``exclusive_process`` by default).

    Examples
    --------
    >>> from hpcgpu.jobspec.resources import GPUJobShape
    >>> shape = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=8,
    ...                            memory_per_gpu="60GiB", walltime="01:30:00")
    >>> for line in LSFDialect().directives(shape, "logs"):
    ...     print(line)
    #BSUB -J hpcgpu
    #BSUB -n 8
    #BSUB -R "span[ptile=4]"
    #BSUB -R "affinity[core(8)]"
    #BSUB -gpu "num=4:mode=exclusive_process"
    #BSUB -R "rusage[mem=61440]"
    #BSUB -M 61440
    #BSUB -W 1:30
    #BSUB -o logs/%J.out
    #BSUB -e logs/%J.err
    """

    job_id_pattern: ClassVar[str] = r"Job <(\d+)>"
    excludes_hosts: ClassVar[bool] = True
    #: dask-jobqueue writes ``#BSUB -P "<project>"``
    quoted_directives: ClassVar[frozenset[str]] = frozenset({"project"})

    memory_unit: str = "MB"
    gpu_mode: str = "exclusive_process"

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.memory_unit not in LSF_UNITS:
            raise ValueError(
                f"memory_unit={self.memory_unit!r}: use one of {', '.join(LSF_UNITS)} "
                "(the site's LSF_UNIT_FOR_LIMITS)"
            )

    def _lines(self, shape: GPUJobShape, log_directory: str) -> list[str]:
        gpu = f"num={shape.gpus_per_node}:mode={self.gpu_mode}"
        if shape.gpu_type:
            gpu += f":gmodel={shape.gpu_type}"
        lines = [
            f"-J {shape.job_name}",
            f"-n {shape.total_gpus}",
            f'-R "span[ptile={shape.gpus_per_node}]"',
            f'-R "affinity[core({shape.cpus_per_gpu})]"',
            f'-gpu "{gpu}"',
        ]
        if shape.gpu_memory is not None:
            # rusage[mem] and -M are per task (slot) on current LSF.
            per_task = math.ceil(shape.gpu_memory / LSF_UNITS[self.memory_unit])
            lines += [f'-R "rusage[mem={per_task}]"', f"-M {per_task}"]
        minutes = math.ceil(shape.walltime / 60)
        lines.append(f"-W {minutes // 60}:{minutes % 60:02d}")
        lines += optional_lines(shape, "-q {}", "-P {}", "-x")
        lines += [f"-o {log_directory}/%J.out", f"-e {log_directory}/%J.err"]
        return lines

    def exclusion_directives(self, hosts) -> tuple[str, ...]:
        """A ``select[]`` of its own (LSF and-s the ``-R`` strings' selections).

        >>> LSFDialect().exclusion_directives(["node2", "node1"])
        ('-R "select[hname!=node1 && hname!=node2]"',)
        """
        hosts = host_names(hosts)
        test = " && ".join(f"hname!={host}" for host in hosts)
        return (f'-R "select[{test}]"',) if hosts else ()

    def submit_argv(self, script_path: str | None = None) -> list[str]:
        # bsub reads #BSUB directives only from a script on standard input.
        return ["sh", "-c", 'exec bsub < "$0"', script_path] if script_path else ["bsub"]

    def status_argv(self, job_ids: list[str]) -> list[str]:
        # -a: recently finished jobs too; -json -o: one machine-readable answer.
        return ["bjobs", "-a", "-json", "-o",
                "jobid jobindex stat exec_host exit_code exit_reason", *job_ids]

    def parse_status(self, output: str) -> dict[str, JobStatus]:
        """Parse ``bjobs -json -o "jobid jobindex stat exec_host exit_code exit_reason"``.

        Examples
        --------
        >>> out = ('{"RECORDS": [{"JOBID": "5", "STAT": "RUN", "EXEC_HOST": "4*n1:4*n2"},'
        ...        ' {"JOBID": "6", "STAT": "EXIT", "EXIT_CODE": "127"},'
        ...        ' {"JOBID": "7", "JOBINDEX": "2", "STAT": "PEND"}]}')
        >>> s = LSFDialect().parse_status(out)
        >>> s["5"].nodes, s["6"].state, s["6"].exit_code, s["7[2]"].state
        (('n1', 'n2'), 'failed', 127, 'pending')
        """
        try:
            data = json.loads(output or "{}")
        except json.JSONDecodeError:
            return {}
        jobs = {}
        for record in data.get("RECORDS", []):
            job_id = str(record.get("JOBID", ""))
            if not job_id or "ERROR" in record:
                continue
            index = str(record.get("JOBINDEX", "") or "0")
            if index != "0":  # an array element: bjobs prints the array's id and the index
                job_id = f"{job_id}[{index}]"
            state = _STATES.get(record.get("STAT", ""), "unknown")
            reason = record.get("EXIT_REASON", "") or ""
            if state == "failed" and "kill" in reason.lower():
                state = "cancelled"
            hosts = [h.split("*")[-1] for h in str(record.get("EXEC_HOST", "")).split(":") if h]
            code = str(record.get("EXIT_CODE", "")).strip()
            jobs[job_id] = JobStatus(job_id, state, tuple(dict.fromkeys(hosts)),
                                     exit_code=int(code) if code.isdigit() else None,
                                     reason=reason)
        return jobs

    def error_log(self, job_name: str, job_id: str, log_directory: str) -> str:
        # an array element 123[4] writes %J_%I: 123_4.err
        return f"{log_directory}/{job_id.replace('[', '_').rstrip(']')}.err"
