"""Host memory per GPU worker: the host's memory shared among its GPU workers.

Dask's ``memory_limit="auto"`` is a share per *thread* of all the host's cores: on a
128-core, 560 GiB node a one-thread GPU worker gets 4.3 GiB and its nanny restarts it
at 95 % of that. A GPU worker's host memory is where its device memory spills, so, as
dask-cuda's ``LocalCUDACluster`` does (``parse_memory_limit(..., nthreads=1,
total_cores=n_workers)``), "auto" here means the host memory divided by the number of
GPU workers on the host, less a headroom for the scheduler, the client and the system.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["HEADROOM", "host_memory_limit", "gpu_workers_on_host"]

#: Fraction of the host memory left to the scheduler, client, launcher and system.
HEADROOM = 0.05

# How many tasks of the job share this host, by launcher (SLURM, Open MPI, MPICH/PALS, LSF jsrun).
_LOCAL_SIZE_VARIABLES = ("SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS",
                         "PALS_LOCAL_SIZE", "JSM_NAMESPACE_LOCAL_SIZE")


def host_memory_limit(memory_limit: str | int | float | None, gpu_workers: int,
                      total: int | None = None, headroom: float = HEADROOM) -> str | int | float | None:
    """Bytes of host memory for each of ``gpu_workers`` GPU workers when ``memory_limit`` is "auto".

    Anything else (a size, a fraction, 0/None for no limit) is Dask's to parse and is
    returned unchanged; so is "auto" without GPU workers (CPU mode keeps Dask's rule).

    Examples
    --------
    >>> GiB = 2**30
    >>> host_memory_limit("auto", 8, total=560 * GiB) / GiB
    66.5
    >>> host_memory_limit("auto", 0, total=560 * GiB)
    'auto'
    >>> host_memory_limit("20GB", 8, total=560 * GiB)
    '20GB'
    """
    if memory_limit != "auto" or gpu_workers < 1:
        return memory_limit
    if total is None:
        from distributed.system import MEMORY_LIMIT  # the host's memory, or the cgroup's limit

        total = MEMORY_LIMIT
    return int(total * (1 - headroom) / gpu_workers)


def gpu_workers_on_host(env: Mapping[str, str], default: int = 1) -> int:
    """The number of this job's tasks on this host, from the launcher's environment.

    Examples
    --------
    >>> gpu_workers_on_host({"SLURM_NTASKS_PER_NODE": "4(x2)"})
    4
    >>> gpu_workers_on_host({"OMPI_COMM_WORLD_LOCAL_SIZE": "8"})
    8
    >>> gpu_workers_on_host({})
    1
    """
    for name in _LOCAL_SIZE_VARIABLES:
        head = env.get(name, "").split("(")[0].split(",")[0]
        if head.isdigit() and int(head) > 0:
            return int(head)
    return default
