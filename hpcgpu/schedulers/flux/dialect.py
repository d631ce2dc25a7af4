"""Flux: ``#FLUX:`` directives (RFC 36), ``flux batch``/``flux cancel``/``flux jobs``.

A batch job is a Flux instance of ``nodes`` nodes holding ``nodes x gpus_per_node`` slots of
one GPU and ``cpus_per_gpu`` cores each (``flux batch -N -n -c -g``); ``flux run`` starts the
workers inside it (:mod:`hpcgpu.launchers.flux`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.schedulers.dialect import Dialect, JobStatus, optional_lines
from hpcgpu.schedulers.slurm.dialect import expand_hostlist

__all__ = ["FluxDialect"]

#: ``flux jobs`` ``{status}`` -> hpcgpu's state; a name not here is "unknown".
_STATES = {"DEPEND": "pending", "PRIORITY": "pending", "SCHED": "pending", "PENDING": "pending",
           "RUN": "running", "RUNNING": "running", "CLEANUP": "completing",
           "COMPLETED": "completed", "FAILED": "failed", "TIMEOUT": "failed",
           "CANCELED": "cancelled"}
_FORMAT = "{id.f58}|{status}|{nodelist}|{returncode}|{exception.note}"


@dataclass(frozen=True)
class FluxDialect(Dialect, name="flux", prefix="#FLUX:", submit_executable="flux",
                  cancel_executable="flux", default_launcher="flux"):
    """Flux directives: slots of one GPU and its cores, spread over whole nodes.

    Examples
    --------
    >>> shape = GPUJobShape.create(nodes=2, gpus_per_node=4, cpus_per_gpu=8, queue="gpu",
    ...                            account="proj1", walltime="01:30:00")
    >>> for line in FluxDialect().directives(shape, "logs"):
    ...     print(line)
    #FLUX: --job-name=hpcgpu
    #FLUX: --nodes=2
    #FLUX: --nslots=8
    #FLUX: --cores-per-slot=8
    #FLUX: --gpus-per-slot=1
    #FLUX: --time-limit=90m
    #FLUX: --queue=gpu
    #FLUX: --setattr=system.bank=proj1
    #FLUX: --output=logs/{{name}}-{{id}}.out
    #FLUX: --error=logs/{{name}}-{{id}}.err
    >>> FluxDialect().directives(GPUJobShape.create(gpus_per_node=4, memory_per_gpu="8GiB"), ".")
    Traceback (most recent call last):
    ...
    ValueError: memory_per_gpu is set, but Flux allocates cores and GPUs, not memory (a job gets \
its nodes' memory): leave memory_per_gpu out, or ask for exclusive nodes
    """

    multi_node_launchers: ClassVar[tuple[str, ...]] = ("flux",)
    submit_options: ClassVar[tuple[str, ...]] = ("batch",)
    #: flux batch prints the job id in F58 (``ƒ2Fz7aK1``, or ``f2Fz7aK1`` in an ASCII locale).
    job_id_pattern: ClassVar[str] = r"^\s*(\S+)"

    def validate(self, shape: GPUJobShape) -> None:
        super().validate(shape)
        if shape.gpu_memory is not None:
            raise ValueError(
                "memory_per_gpu is set, but Flux allocates cores and GPUs, not memory (a job "
                "gets its nodes' memory): leave memory_per_gpu out, or ask for exclusive nodes")

    def _lines(self, shape: GPUJobShape, log_directory: str) -> list[str]:
        lines = [
            f"--job-name={shape.job_name}",
            f"--nodes={shape.nodes}",
            f"--nslots={shape.total_gpus}",  # Flux spreads them evenly: gpus_per_node a node
            f"--cores-per-slot={shape.cpus_per_gpu}",
            "--gpus-per-slot=1",
            f"--time-limit={math.ceil(shape.walltime / 60)}m",
        ]
        # flux-accounting's bank is the account
        lines += optional_lines(shape, "--queue={}", "--setattr=system.bank={}", "--exclusive")
        return lines + [f"--output={log_directory}/{{{{name}}}}-{{{{id}}}}.out",
                        f"--error={log_directory}/{{{{name}}}}-{{{{id}}}}.err"]

    def cancel_argv(self, job_ids: list[str]) -> list[str]:
        return ["flux", "cancel", *job_ids]

    def status_argv(self, job_ids: list[str]) -> list[str]:
        # -a: inactive jobs too (the job record keeps them)
        return ["flux", "jobs", "-a", "--no-header", f"--format={_FORMAT}", *job_ids]

    def parse_status(self, output: str) -> dict[str, JobStatus]:
        """Parse ``flux jobs --format={id.f58}|{status}|{nodelist}|{returncode}|...``.

        Examples
        --------
        >>> out = "ƒA1|RUNNING|node[1-2]||\\nƒB2|FAILED|node3|3|\\nƒC3|CANCELED||-128|canceled\\n"
        >>> s = FluxDialect().parse_status(out)
        >>> s["ƒA1"].nodes, s["ƒB2"].state, s["ƒB2"].exit_code, s["ƒC3"].state
        (('node1', 'node2'), 'failed', 3, 'cancelled')
        """
        jobs = {}
        for line in output.splitlines():
            parts = line.strip().split("|", 4)  # the note (last) is free text
            if len(parts) != 5:
                continue
            job_id, status, nodes, code, note = parts
            exit_code = int(code) if code.lstrip("-").isdigit() else None
            jobs[job_id] = JobStatus(job_id, _STATES.get(status, "unknown"),
                                     expand_hostlist(nodes), exit_code=exit_code,
                                     reason=note or status)
        return jobs

    def error_log(self, job_name: str, job_id: str, log_directory: str) -> str:
        """``--error=dir/{{name}}-{{id}}.err``: the id as flux batch printed it (F58)."""
        return f"{log_directory}/{job_name}-{job_id}.err"
