"""(Son of) Grid Engine: everything hpcgpu looks up by the name ``sge``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Mapping

from hpcgpu.schedulers.base import Scheduler, int_or_none, unique_lines
from hpcgpu.schedulers.sge.dialect import SGEDialect

if TYPE_CHECKING:
    from hpcgpu.schedulers.arrays import ArrayRequest

__all__ = ["SCHEDULER", "SGE"]


class SGE(Scheduler):
    """Grid Engine: ``qsub`` with a parallel environment, ``mpirun`` across nodes, ``-t``.

    >>> SCHEDULER.preemption_lines(60, True), SCHEDULER.job_id({"JOB_ID": "8", "SGE_TASK_ID": "3"})
    (['-notify', '-r y'], '8.3')
    """

    name = "sge"
    dialect_class = SGEDialect
    account_key = "project"
    job_id_variable = "JOB_ID"
    first_array_index = 1
    throttles_arrays = True
    array_index_variable = "SGE_TASK_ID"  # "undefined" outside an array
    element_id_from_index = True
    array_limit_query = (("qconf", "-sconf"), r"^max_aj_tasks\s+(\d+)")  # 0: no limit
    batch_launcher = "mpirun"  # Open MPI reads the PE's hosts
    batch_direct_on_one_node = True
    cpu_job = ("dask_jobqueue.sge", "SGEJob")
    cluster_class = "SGECluster"
    queries_module = "hpcgpu.schedulers.sge.queues"
    cluster_variables = ("SGE_CLUSTER_NAME", "SGE_CELL")

    def preemption_lines(self, signal_before: int | None, requeue: bool) -> list[str]:
        # -notify: SIGUSR1 before suspension, SIGUSR2 before the kill
        return (["-notify"] if signal_before is not None else []) + (["-r y"] if requeue else [])

    def array_directives(self, request: ArrayRequest, job_name: str,
                         log_directory: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        # -o dir/: Grid Engine writes <name>.o<job>.<task> itself
        limit = request.throttle
        return (), (f"-t {request.first}-{request.indices[-1]}",) + ((f"-tc {limit}",) if limit else ())

    def element_job_id(self, array_id: str, index: int) -> str:
        return f"{array_id}.{index}"

    def element_index(self, job_id: str) -> tuple[str, int | None]:
        match = re.fullmatch(r"(\d+)\.(\d+)", job_id)
        return (match.group(1), int(match.group(2))) if match else (job_id, None)

    def in_job(self, env: Mapping[str, str]) -> bool:
        # JOB_ID alone is too common a name: Grid Engine's own variables must be there too
        return bool(env.get("JOB_ID") and (env.get("SGE_ROOT") or env.get("PE_HOSTFILE")
                                           or env.get("SGE_TASK_ID")))

    def hosts_and_cpus(self, env: Mapping[str, str]) -> tuple[list[str], int | None, int | None]:
        hosts = unique_lines(env.get("PE_HOSTFILE"))
        return hosts, len(hosts) or 1, int_or_none(env.get("NSLOTS"))

    def gpus_from_env(self, env: Mapping[str, str]) -> int | None:
        ids = [v for v in env.get("SGE_HGR_gpu", "").replace(",", " ").split()
               if v and v != "NoDevFiles"]
        return len(ids) or None

    def ended_argv(self, job_id: str) -> list[str] | None:
        return ["qstat", "-j", job_id] if job_id.isdigit() else None

    def ended(self, returncode: int, stdout: str, stderr: str) -> bool:
        return returncode != 0 and "do not exist" in stderr

    def cpu_error_log(self, directory: str, log_directory: str | None, job_name: str | None,
                      worker_name: str, job_id: str) -> str:
        # -j y puts stderr in the .o file
        return f"{directory}/{job_name}.o{job_id.split('.')[0]}"


SCHEDULER = SGE()
