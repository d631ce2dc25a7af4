"""IBM Spectrum LSF: everything hpcgpu looks up by the name ``lsf``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from hpcgpu.schedulers.base import Scheduler
from hpcgpu.schedulers.lsf.dialect import LSFDialect

if TYPE_CHECKING:
    from hpcgpu.schedulers.arrays import ArrayRequest

__all__ = ["LSF", "SCHEDULER"]


def _lsf_slots(env: Mapping[str, str]) -> list[tuple[str, int]]:
    """(host, slots) from ``LSB_MCPU_HOSTS``, else ``$LSB_DJOB_HOSTFILE`` (a line per slot)."""
    words = env.get("LSB_MCPU_HOSTS", "").split()
    if words:
        return list(zip(words[::2], (int(n) for n in words[1::2])))
    path = env.get("LSB_DJOB_HOSTFILE")
    if not path or not Path(path).is_file():
        return []
    lines = [line.split()[0] for line in Path(path).read_text().splitlines() if line.split()]
    return [(host, lines.count(host)) for host in dict.fromkeys(lines)]


class LSF(Scheduler):
    """LSF: ``bsub`` with ``-gpu``, ``jsrun`` across nodes, ``-J "name[1-K]"`` arrays.

    >>> SCHEDULER.preemption_lines(90, False), SCHEDULER.job_id({"LSB_JOBID": "5",
    ...                                                          "LSB_JOBINDEX": "2"})
    (['-wa USR1', '-wt 2'], '5[2]')
    """

    name = "lsf"
    dialect_class = LSFDialect
    account_key = "project"
    job_id_variable = "LSB_JOBID"
    first_array_index = 1
    throttles_arrays = True
    array_index_variable = "LSB_JOBINDEX"
    element_id_from_index = True
    default_array_limit = 1000  # LSF's MAX_JOB_ARRAY_SIZE
    batch_launcher = "jsrun"
    cpu_job = ("dask_jobqueue.lsf", "LSFJob")
    cluster_class = "LSFCluster"
    queries_module = "hpcgpu.schedulers.lsf.queues"
    cluster_variables = ("LSF_CLUSTER_NAME",)
    output_spooled_by = "LSF (unless the site sets LSB_STDOUT_DIRECT=Y)"
    walltime_hours_minutes = True  # -W is [HH:]MM

    def preemption_lines(self, signal_before: int | None, requeue: bool) -> list[str]:
        signal = [] if signal_before is None else [
            "-wa USR1", f"-wt {max(1, -(-int(signal_before) // 60))}"]
        return signal + (["-r"] if requeue else [])

    def array_directives(self, request: ArrayRequest, job_name: str,
                         log_directory: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        first, last, limit = request.first, request.indices[-1], request.throttle
        throttle = f"%{limit}" if limit else ""
        return (("-J ", "-o ", "-e "),
                (f'-J "{job_name}[{first}-{last}]{throttle}"', f"-o {log_directory}/%J_%I.out",
                 f"-e {log_directory}/%J_%I.err"))

    def hosts_and_cpus(self, env: Mapping[str, str]) -> tuple[list[str], int | None, int | None]:
        pairs = _lsf_slots(env)
        # CORAL-style sites list the launch node first with one slot: it runs no GPU task.
        if len(pairs) > 1 and pairs[0][1] == 1 and all(n > 1 for _, n in pairs[1:]):
            pairs = pairs[1:]
        hosts = [h for h, _ in pairs]
        return hosts, len(hosts) or None, pairs[0][1] if pairs else None

    def cpu_error_log(self, directory: str, log_directory: str | None, job_name: str | None,
                      worker_name: str, job_id: str) -> str:
        return f"{directory}/{worker_name or 'worker'}-{job_id}.err"


SCHEDULER = LSF()
