"""PBS Pro and OpenPBS: everything hpcgpu looks up by the name ``pbs``."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Mapping

from hpcgpu.schedulers.base import Scheduler, int_or_none, unique_lines
from hpcgpu.schedulers.pbs.dialect import PBSDialect

if TYPE_CHECKING:
    from hpcgpu.schedulers.arrays import ArrayRequest

__all__ = ["PBS", "SCHEDULER"]


class PBS(Scheduler):
    """PBS: ``qsub`` with ``select`` chunks, ``mpiexec`` across nodes, ``-J`` arrays.

    >>> SCHEDULER.element_job_id("123[].pbs01", 4), SCHEDULER.element_index("123[4].pbs01")
    ('123[4].pbs01', ('123[].pbs01', 4))
    """

    name = "pbs"
    dialect_class = PBSDialect
    job_id_variable = "PBS_JOBID"
    first_array_index = 0
    array_index_variable = "PBS_ARRAY_INDEX"
    default_array_limit = 10000  # PBS Pro's max_array_size
    batch_launcher = "mpiexec"
    batch_direct_on_one_node = True  # sites' mpiexec differ (PALS --ppn, Open MPI refuses it)
    cpu_job = ("dask_jobqueue.pbs", "PBSJob")
    cluster_class = "PBSCluster"
    queries_module = "hpcgpu.schedulers.pbs.queues"
    cluster_variables = ("PBS_SERVER",)
    output_spooled_by = "PBS"

    def preemption_lines(self, signal_before: int | None, requeue: bool) -> list[str]:
        # PBS sends SIGTERM, then SIGKILL after kill_delay: no signal to ask for
        return ["-r y"] if requeue else []

    def array_directives(self, request: ArrayRequest, job_name: str,
                         log_directory: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        return (), (f"-J {request.first}-{request.indices[-1]}",)  # -J has no throttle

    def element_job_id(self, array_id: str, index: int) -> str:
        number, _, server = array_id.partition(".")
        return f"{number.removesuffix('[]')}[{index}]" + (f".{server}" if server else "")

    def element_index(self, job_id: str) -> tuple[str, int | None]:
        match = re.fullmatch(r"(\d+)\[(\d+)\](.*)", job_id)
        if not match:
            return job_id, None
        return match.group(1) + "[]" + match.group(3), int(match.group(2))

    def hosts_and_cpus(self, env: Mapping[str, str]) -> tuple[list[str], int | None, int | None]:
        hosts = unique_lines(env.get(PBSDialect.host_file))
        return hosts, len(hosts) or None, int_or_none(env.get("NCPUS"))

    def cpu_error_log(self, directory: str, log_directory: str | None, job_name: str | None,
                      worker_name: str, job_id: str) -> str:
        if log_directory:
            return f"{directory}/{job_id}.ER"  # -e dir/: <job id>.ER (real OpenPBS)
        return super().cpu_error_log(directory, log_directory, job_name, worker_name, job_id)


SCHEDULER = PBS()
