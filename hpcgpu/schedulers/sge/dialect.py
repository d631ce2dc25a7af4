"""(Son of) Grid Engine: ``#$`` directives, a parallel environment, ``qsub``/``qdel``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Literal

from hpcgpu.schedulers.arrays import expand_indices
from hpcgpu.schedulers.dialect import Dialect, JobStatus, host_names, optional_lines
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.jobspec.units import format_memory

__all__ = ["SGEDialect", "SGE_MEMORY_UNITS"]

SGE_MEMORY_UNITS = (("G", 2**30), ("M", 2**20), ("K", 2**10))


@dataclass(frozen=True)
class SGEDialect(Dialect, name="sge", prefix="#$", submit_executable="qsub",
                 cancel_executable="qdel", default_launcher="direct"):
    """Grid Engine directives: one slot per GPU in a parallel environment.

    Parameters
    ----------
    parallel_environment : str
        PE for single-node jobs (``$pe_slots`` allocation, ``smp`` on most sites).
    multi_node_parallel_environment : str or None
        PE that spans hosts with exactly ``gpus_per_node`` slots per host (an
        ``allocation_rule`` of G); needed when ``nodes > 1``.
    gpu_complex : str
        Name of the consumable complex that counts GPUs.
    gpu_consumable : {"slot", "job"}
        ``slot`` when the complex is consumable per slot (``YES``): ``-l gpu=1`` with G slots
        takes G GPUs. ``job`` when it is consumable per job (``JOB``): ``-l gpu=G``.
    memory_resource : {"h_vmem", "mem_free"}
        The per-slot memory request.

    Examples
    --------
    >>> from hpcgpu.jobspec.resources import GPUJobShape
    >>> shape = GPUJobShape.create(gpus_per_node=4, memory_per_gpu="16GiB")
    >>> for line in SGEDialect().directives(shape, "logs"):
    ...     print(line)
    #$ -N hpcgpu
    #$ -S /bin/bash
    #$ -pe smp 4
    #$ -l gpu=1
    #$ -l h_vmem=16G
    #$ -l h_rt=01:00:00
    #$ -cwd
    #$ -j y
    #$ -o logs/
    >>> SGEDialect().directives(GPUJobShape.create(nodes=2, gpus_per_node=4), "logs")
    Traceback (most recent call last):
    ...
    ValueError: nodes=2 needs a parallel environment that spans hosts with 4 slots per host: \
set multi_node_parallel_environment (ask your admins which PE has allocation_rule 4) and \
launcher='mpirun' (Open MPI reads the PE's hosts), or use nodes=1
    """

    submit_options: ClassVar[tuple[str, ...]] = ("-terse",)
    # Grid Engine has no launcher of its own: Open MPI's mpirun reads the PE's host list.
    multi_node_launchers: ClassVar[tuple[str, ...]] = ("mpirun",)
    job_id_pattern: ClassVar[str] = r"(?:^|Your job )(\d+)"
    excludes_hosts: ClassVar[bool] = True

    parallel_environment: str = "smp"
    multi_node_parallel_environment: str | None = None
    gpu_complex: str = "gpu"
    gpu_consumable: Literal["slot", "job"] = "slot"
    memory_resource: Literal["h_vmem", "mem_free"] = "h_vmem"

    def validate(self, shape: GPUJobShape) -> None:
        super().validate(shape)
        if shape.nodes > 1 and not self.multi_node_parallel_environment:
            raise ValueError(
                f"nodes={shape.nodes} needs a parallel environment that spans hosts with "
                f"{shape.gpus_per_node} slots per host: set multi_node_parallel_environment "
                f"(ask your admins which PE has allocation_rule {shape.gpus_per_node}) and "
                "launcher='mpirun' (Open MPI reads the PE's hosts), or use nodes=1"
            )

    def _lines(self, shape: GPUJobShape, log_directory: str) -> list[str]:
        pe = self.parallel_environment if shape.nodes == 1 else self.multi_node_parallel_environment
        gpus = 1 if self.gpu_consumable == "slot" else shape.gpus_per_node
        lines = [
            f"-N {shape.job_name}",
            "-S /bin/bash",
            f"-pe {pe} {shape.total_gpus}",
            f"-l {self.gpu_complex}={gpus}",
        ]
        if shape.gpu_memory is not None:
            memory = format_memory(shape.gpu_memory, SGE_MEMORY_UNITS)
            lines.append(f"-l {self.memory_resource}={memory}")
        lines.append(f"-l h_rt={shape.walltime_hms}")
        if shape.exclusive:
            lines.append("-l exclusive=true")
        lines += optional_lines(shape, "-q {}", "-P {}")
        lines += ["-cwd", "-j y", f"-o {log_directory}/"]
        return lines

    def exclusion_directives(self, hosts) -> tuple[str, ...]:
        """``-l h=`` with a negated host per host, and-ed (a resource expression of qsub's).

        >>> SGEDialect().exclusion_directives(["node2", "node1"])
        ('-l h=!node1&!node2',)
        """
        hosts = host_names(hosts)
        return (f"-l h={'&'.join('!' + host for host in hosts)}",) if hosts else ()

    def check_argv(self, script_path: str) -> list[str]:
        # -w v: verify the request against an empty cluster, schedule nothing.
        return ["qsub", "-w", "v", script_path]

    def status_argv(self, job_ids: list[str]) -> list[str]:
        # qstat lists only queued and running jobs; finished ones drop out (see qacct).
        return ["qstat", "-u", "*"]

    def parse_status(self, output: str) -> dict[str, JobStatus]:
        r"""Parse plain ``qstat``: ``qw`` pending, ``r``/``t`` running, ``d*`` being deleted,
        ``E*`` error (failed).

        Examples
        --------
        >>> out = "\n".join([
        ...     "job-ID  prior   name  user  state submit/start at     queue     slots",
        ...     "     42 0.50000 w     root  r     11/21/2026 22:47:05 all.q@vm  2",
        ...     "     43 0.00000 w     root  qw    11/21/2026 22:47:06           2",
        ...     "     44 0.50000 w     root  Eqw   11/21/2026 22:47:06           2"])
        >>> {k: (v.state, v.nodes) for k, v in SGEDialect().parse_status(out).items()}
        {'42': ('running', ('vm',)), '43': ('pending', ()), '44': ('failed', ())}
        """
        jobs = {}
        for line in output.splitlines():
            parts = line.split()
            if len(parts) < 5 or not parts[0].isdigit():
                continue
            job_id, state = parts[0], parts[4]
            if "E" in state:
                mapped = "failed"
            elif "d" in state:
                mapped = "cancelled"
            elif state.endswith(("r", "t", "R")):
                mapped = "running"
            else:
                mapped = "pending"
            rest = parts[7:]  # [queue] slots [ja-task-ID]
            nodes = (rest.pop(0).split("@", 1)[1],) if rest and "@" in rest[0] else ()
            tasks = expand_indices(rest[1]) if len(rest) > 1 else []
            for one in [f"{job_id}.{t}" for t in tasks] or [job_id]:
                jobs[one] = JobStatus(one, mapped, nodes, reason=state)
        return jobs

    def exit_code_argv(self, job_id: str) -> list[str]:
        number, _, task = job_id.partition(".")  # an array element: 123.4
        return ["qacct", "-j", number, *(["-t", task] if task else [])]

    def parse_exit_code(self, output: str) -> int | None:
        r"""``exit_status`` in ``qacct -j``.

        >>> SGEDialect().parse_exit_code("failed       0\nexit_status  127\n")
        127
        """
        match = re.search(r"^exit_status\s+(\d+)", output, re.MULTILINE)
        return int(match.group(1)) if match else None

    def parse_end_nodes(self, output: str) -> tuple[str, ...]:
        r"""``hostname`` in ``qacct -j``: the job's master host.

        >>> SGEDialect().parse_end_nodes("qname        all.q\nhostname     vm\n")
        ('vm',)
        """
        match = re.search(r"^hostname\s+(\S+)", output, re.MULTILINE)
        return (match.group(1),) if match else ()

    def error_log(self, job_name: str, job_id: str, log_directory: str) -> str:
        # -j y -o dir/: stdout and stderr both in <name>.o<id>
        return f"{log_directory}/{job_name}.o{job_id}"
