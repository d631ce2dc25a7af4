"""SLURM: everything hpcgpu looks up by the name ``slurm``."""

from __future__ import annotations

import glob
import os
import re
from typing import TYPE_CHECKING, Mapping

from hpcgpu.schedulers.base import Scheduler, int_or_none
from hpcgpu.schedulers.slurm.dialect import SlurmDialect
from hpcgpu.schedulers.slurm.environment import (_min_cpus, in_salloc_shell, slurm_gpus,
                                                 slurm_tasks)

if TYPE_CHECKING:
    from hpcgpu.schedulers.arrays import ArrayRequest

__all__ = ["SCHEDULER", "Slurm"]

#: SLURM states of a job that has ended (``squeue -o %T``).
_ENDED = {"BOOT_FAIL", "CANCELLED", "COMPLETED", "DEADLINE", "FAILED", "NODE_FAIL",
          "OUT_OF_MEMORY", "PREEMPTED", "TIMEOUT"}


class Slurm(Scheduler):
    """SLURM: ``sbatch`` jobs, ``srun`` across nodes, ``--array``, ``--signal``.

    >>> SCHEDULER.preemption_lines(120, True), SCHEDULER.element_index("123_4")
    (['--signal=USR1@120', '--requeue'], ('123', 4))
    """

    name = "slurm"
    dialect_class = SlurmDialect
    job_id_variable = "SLURM_JOB_ID"
    first_array_index = 0
    throttles_arrays = True
    array_index_variable = "SLURM_ARRAY_TASK_ID"
    array_limit_query = (("scontrol", "show", "config"), r"^MaxArraySize\s*=\s*(\d+)")
    batch_launcher = "srun"
    cpu_job = ("dask_jobqueue.slurm", "SLURMJob")
    cluster_class = "SLURMCluster"
    queries_module = "hpcgpu.schedulers.slurm.partitions"
    cluster_variables = ("SLURM_CLUSTER_NAME",)

    def preemption_lines(self, signal_before: int | None, requeue: bool) -> list[str]:
        signal = [] if signal_before is None else [f"--signal=USR1@{int(signal_before)}"]
        return signal + (["--requeue"] if requeue else [])

    def array_directives(self, request: ArrayRequest, job_name: str,
                         log_directory: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        first, last, limit = request.first, request.indices[-1], request.throttle
        throttle = f"%{limit}" if limit else ""
        return (("--output=", "--error="),
                (f"--array={first}-{last}{throttle}", f"--output={log_directory}/%x-%A_%a.out",
                 f"--error={log_directory}/%x-%A_%a.err"))

    def element_job_id(self, array_id: str, index: int) -> str:
        return f"{array_id}_{index}"

    def element_index(self, job_id: str) -> tuple[str, int | None]:
        match = re.fullmatch(r"(\d+)_(\d+)", job_id)
        return (match.group(1), int(match.group(2))) if match else (job_id, None)

    def hosts_and_cpus(self, env: Mapping[str, str]) -> tuple[list[str], int | None, int | None]:
        nodes = int_or_none(env.get("SLURM_JOB_NUM_NODES")) or int_or_none(env.get("SLURM_NNODES"))
        # every node's step gets at most the smallest node's cores
        cpus = (_min_cpus(env.get("SLURM_JOB_CPUS_PER_NODE"))
                or int_or_none(env.get("SLURM_CPUS_ON_NODE")))
        return [], nodes, cpus

    def gpus_from_env(self, env: Mapping[str, str]) -> int | None:
        return slurm_gpus(env)

    def gpus_unknowable(self, env: Mapping[str, str]) -> str | None:
        if not in_salloc_shell(env):
            return None
        # salloc's shell runs on the login node: its GPUs are not the job's
        return ("gpus_per_node is unknown: SLURM sets no GPU count in salloc's shell for --gres "
                "or --exclusive (it does for --gpus-per-node, --gpus-per-task and --gpus); "
                "ask salloc for --gpus-per-node N")

    def tasks(self, env: Mapping[str, str]) -> dict[str, int]:
        return slurm_tasks(self.name, env)

    def ended_argv(self, job_id: str) -> list[str] | None:
        return ["squeue", "-h", "-j", job_id, "-o", "%T", "--states=all"] if job_id.isdigit() else None

    def ended(self, returncode: int, stdout: str, stderr: str) -> bool:
        if returncode != 0:
            return "Invalid job id" in stderr
        return set(stdout.split()) <= _ENDED  # nothing listed: gone from the queue

    def check_cpu_queue(self, queue: str | None, cores: int, memory: int) -> None:
        from hpcgpu.schedulers.slurm.partitions import check_cpu_partition

        check_cpu_partition(queue, cores, memory)

    def cpu_error_log(self, directory: str, log_directory: str | None, job_name: str | None,
                      worker_name: str, job_id: str) -> str:
        if not log_directory:
            return f"{directory}/slurm-{job_id}.out"
        path = f"{directory}/{job_name or 'worker'}-{job_id}.err"
        # %J is <id>.<step> on some SLURM versions.
        return path if os.path.exists(path) else next(
            iter(glob.glob(f"{directory}/{job_name or 'worker'}-{job_id}.*err")), path)


SCHEDULER = Slurm()
