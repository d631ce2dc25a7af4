"""SLURM: ``#SBATCH`` directives, ``sbatch``/``scancel``/``squeue``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar, Literal

from hpcgpu.schedulers.arrays import expand_indices
from hpcgpu.schedulers.dialect import Dialect, JobStatus, host_names, optional_lines
from hpcgpu.jobspec.resources import GPUJobShape
from hpcgpu.jobspec.units import format_hms, format_memory

__all__ = ["SlurmDialect", "SLURM_MEMORY_UNITS", "expand_hostlist"]

SLURM_MEMORY_UNITS = (("T", 2**40), ("G", 2**30), ("M", 2**20))
#: Every name squeue's ``%T`` prints (``job_state_string`` of SLURM 22.05 to 25.11; a flag such
#: as STOPPED is printed instead of its job's base state) -> hpcgpu's state. A name not here
#: (a newer SLURM's) is "unknown", never "failed": a running job must not be replaced.
_STATES = {
    "PENDING": "pending", "CONFIGURING": "pending", "REQUEUED": "pending",
    "REQUEUE_FED": "pending", "REQUEUE_HOLD": "pending", "SPECIAL_EXIT": "pending",
    "RESV_DEL_HOLD": "pending", "SUSPENDED": "pending",
    # still holding its nodes, walltime running: resized, being signalled, SIGSTOPped
    "RUNNING": "running", "RESIZING": "running", "SIGNALING": "running", "STOPPED": "running",
    "COMPLETING": "completing", "STAGE_OUT": "completing", "EXPEDITING": "completing",
    "COMPLETED": "completed", "CANCELLED": "cancelled", "REVOKED": "cancelled",
    "FAILED": "failed", "TIMEOUT": "failed", "NODE_FAIL": "failed", "PREEMPTED": "failed",
    "BOOT_FAIL": "failed", "DEADLINE": "failed", "OUT_OF_MEMORY": "failed",
}


@dataclass(frozen=True)
class SlurmDialect(Dialect, name="slurm", prefix="#SBATCH", submit_executable="sbatch",
                   cancel_executable="scancel", default_launcher="srun"):
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
    >>> from hpcgpu.jobspec.resources import GPUJobShape
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

    submit_options: ClassVar[tuple[str, ...]] = ("--parsable",)
    job_id_pattern: ClassVar[str] = r"^\s*(\d+)"
    #: sbatch reads a directive's quotes as bash does, and SLURM accounts may hold spaces
    #: ("Dask On SLURM"); hpcgpu quotes the account (tests/integration/test_directive_parse.py)
    quoted_fields: ClassVar[frozenset[str]] = frozenset({"account"})
    excludes_hosts: ClassVar[bool] = True

    gpu_directive: Literal["gpus-per-node", "gres"] = "gpus-per-node"
    memory_directive: Literal["mem", "mem-per-gpu"] = "mem"

    def _lines(self, shape: GPUJobShape, log_directory: str) -> list[str]:
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
        lines += optional_lines(shape, "--partition={}", "--account={}", "--exclusive", self.quoted_fields)
        lines += [f"--output={log_directory}/%x-%j.out", f"--error={log_directory}/%x-%j.err"]
        return lines

    def exclusion_directives(self, hosts) -> tuple[str, ...]:
        """``--exclude=`` with the hosts (sbatch's own list form).

        >>> SlurmDialect().exclusion_directives(["node2", "node1"])
        ('--exclude=node1,node2',)
        """
        hosts = host_names(hosts)
        return (f"--exclude={','.join(hosts)}",) if hosts else ()

    def check_argv(self, script_path: str) -> list[str]:
        return ["sbatch", "--test-only", script_path]

    def status_argv(self, job_ids: list[str]) -> list[str]:
        # --array: one line per element. Without it squeue folds an array's pending elements
        # into one id cut at 31 characters ("271_[101,103,107,109,113,127,13"): the
        # elements after the cut would look finished.
        return ["squeue", "--noheader", "--states=all", "--array", f"--jobs={','.join(job_ids)}",
                "--format=%i|%T|%N|%r"]

    def parse_status(self, output: str) -> dict[str, JobStatus]:
        r"""Parse ``squeue --format=%i|%T|%N|%r``.

        Examples
        --------
        >>> out = "12|RUNNING|node[1-2]|None\n13|FAILED|node3|NonZeroExitCode\n"
        >>> status = SlurmDialect().parse_status(out)
        >>> status["12"].state, status["12"].nodes, status["13"].state
        ('running', ('node1', 'node2'), 'failed')
        >>> SlurmDialect().parse_status("14|PENDING||held: disk|quota\n")["14"].reason
        'held: disk|quota'
        """
        jobs = {}
        for line in output.splitlines():
            parts = line.strip().split("|", 3)  # the reason (last) is free text, "|" too
            if len(parts) != 4:
                continue
            job_id, state, nodes, reason = parts
            for one in _array_elements(job_id):
                jobs[one] = JobStatus(one, _STATES.get(state, "unknown"),
                                      expand_hostlist(nodes), reason=reason)
        return jobs

    def exit_code_argv(self, job_id: str) -> list[str]:
        return ["scontrol", "show", "job", job_id]

    def parse_exit_code(self, output: str) -> int | None:
        """``ExitCode=3:0`` (code:signal) in ``scontrol show job``; a signal gives 128+n.

        >>> SlurmDialect().parse_exit_code("JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0")
        3
        """
        match = re.search(r"\bExitCode=(\d+):(\d+)", output)
        if not match:
            return None
        code, signal = int(match.group(1)), int(match.group(2))
        return 128 + signal if signal and not code else code

    def parse_end_nodes(self, output: str) -> tuple[str, ...]:
        r"""``NodeList=`` in ``scontrol show job`` (not ``ReqNodeList``/``ExcNodeList``).

        >>> SlurmDialect().parse_end_nodes("   ReqNodeList=(null) ExcNodeList=(null)\n   NodeList=node[1-2]")
        ('node1', 'node2')
        """
        match = re.search(r"(?<![A-Za-z])NodeList=(\S+)", output)
        nodes = match.group(1) if match else ""
        return expand_hostlist(nodes) if nodes and nodes != "(null)" else ()

    def error_log(self, job_name: str, job_id: str, log_directory: str) -> str:
        return f"{log_directory}/{job_name}-{job_id}.err"


def _array_elements(job_id: str) -> list[str]:
    """``123_[4-5%2]`` (an array's pending elements on one line) -> ``123_4``, ``123_5``.

    >>> _array_elements("123_[4-5%2]"), _array_elements("123_4"), _array_elements("9")
    (['123_4', '123_5'], ['123_4'], ['9'])
    """
    match = re.fullmatch(r"(\d+)_\[([^\]]+)\]", job_id)
    if not match and re.fullmatch(r"\d+_\[[^\]]*", job_id):
        raise ValueError(f"squeue cut the array's element list short ({job_id!r}): run it "
                         "with --array (one line per element)")
    if not match:
        return [job_id]
    return [f"{match.group(1)}_{i}" for i in expand_indices(match.group(2))]


def expand_hostlist(text: str) -> tuple[str, ...]:
    """Expand a SLURM host list such as ``node[1-3,7],gpu01``, as ``scontrol show hostnames``
    does: several brackets in one name give every combination.

    >>> expand_hostlist("node[1-2,4],login")
    ('node1', 'node2', 'node4', 'login')
    >>> expand_hostlist("rack[1-2]-n[1-2]")
    ('rack1-n1', 'rack1-n2', 'rack2-n1', 'rack2-n2')
    >>> expand_hostlist("")
    ()
    """
    hosts: list[str] = []
    for name in re.findall(r"(?:[^,\[]|\[[^\]]*\])+", text):  # commas inside brackets stay
        hosts += _expand_name(name)
    return tuple(h for h in hosts if h and h != "(null)")


def _expand_name(name: str) -> list[str]:
    """One name with brackets, in SLURM's order: the last bracket varies fastest, the others
    from the right (slowest) to the left (hostlist.c expands the prefix's last one first)."""
    last = name.rfind("[")
    if last < 0 or "]" not in name[last:]:
        return [name]
    prefix, rest = name[:last], name[last + 1:]
    ranges, _, suffix = rest.partition("]")
    inner = prefix.rfind("[")
    if inner < 0 or "]" not in prefix[inner:]:
        return [f"{prefix}{number}{suffix}" for number in _numbers(ranges)]
    head, middle = prefix[:inner], prefix[inner + 1:]
    outer, _, between = middle.partition("]")
    return [host for number in _numbers(outer)
            for host in _expand_name(f"{head}{number}{between}[{ranges}]{suffix}")]


def _numbers(ranges: str) -> list[str]:
    """``1-3,07`` -> ``1 2 3 07``: a range keeps its first number's width (zero padding)."""
    numbers = []
    for part in ranges.split(","):
        low, _, high = part.strip().partition("-")
        numbers += [f"{n:0{len(low)}d}" for n in range(int(low), int(high or low) + 1)]
    return numbers
