"""What every rank-launched bootstrap shares (:class:`~hpcgpu.runner.GPURunner`, :mod:`hpcgpu.mpi`).

Rank 0 runs the client and the scheduler, and *also* a worker on its own GPU, as a
``python -m hpcgpu.worker`` child process (fork and exec: no re-import of the user's
script, no GIL shared with the client). Every other rank runs one in-process worker,
pinned to its GPU before anything CUDA-related is imported. So no GPU is left idle for
the scheduler or the client (dask-mpi#29).
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

from hpcgpu.runner.processes import Child, start_child
from hpcgpu.worker.placement import Placement, job_id_from_env, placement_from_env
from hpcgpu.jobspec.worker_command import WorkerCommand

__all__ = [
    "rank_and_size", "pin_gpu", "worker_options", "start_own_worker", "exit_code_of",
    "record_exit_code", "RECORDED_EXIT_CODE", "close_clients_of",
]

_SIZE_VARIABLES = ("SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PALS_SIZE",
                   "PMIX_SIZE", "JSM_NAMESPACE_SIZE")


def rank_and_size(env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """This process's rank and the number of ranks, from the launcher's environment.

    Examples
    --------
    >>> rank_and_size({"SLURM_PROCID": "3", "SLURM_NTASKS": "8"})
    (3, 8)
    >>> rank_and_size({})
    Traceback (most recent call last):
    ...
    RuntimeError: no launcher rank here (SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, ...): \
start the script on every rank with srun, mpirun, mpiexec or jsrun
    """
    from hpcgpu.launchers import RANK_VARIABLES

    env = os.environ if env is None else env
    rank = next((int(env[v]) for v in RANK_VARIABLES if env.get(v, "").isdigit()), None)
    size = next((int(env[v]) for v in _SIZE_VARIABLES if env.get(v, "").isdigit()), None)
    if rank is None or size is None:
        raise RuntimeError(
            "no launcher rank here (SLURM_PROCID, OMPI_COMM_WORLD_RANK, PMI_RANK, ...): start "
            "the script on every rank with srun, mpirun, mpiexec or jsrun"
        )
    return rank, size


def pin_gpu(local_rank: int | None = None, node: int | None = None) -> Placement:
    """Pin this process to its GPU (``CUDA_VISIBLE_DEVICES``) and record its place for the
    worker preload (``HPCGPU_*``). Must run before CUDA is initialised in the process."""
    if local_rank is not None:
        os.environ["HPCGPU_LOCAL_RANK"] = str(local_rank)
    if node is not None:
        os.environ["HPCGPU_NODE_RANK"] = str(node)
    place = placement_from_env(None)
    os.environ.update(
        HPCGPU_GPU=place.gpu or "", HPCGPU_NODE_RANK=str(place.node),
        HPCGPU_LOCAL_RANK=str(place.local_rank),
        HPCGPU_JOB_ID=job_id_from_env(),
    )
    if place.gpu is not None:
        os.environ["CUDA_VISIBLE_DEVICES"] = place.gpu
    return place


#: The worker class of every rank (as ``python -m hpcgpu.worker`` starts for rank 0): RMM
#: pool, CuPy on RMM, spilling and CPU affinity, from the ``HPCGPU_*`` environment.
GPU_WORKER = "hpcgpu.worker.gpuworker.GPUWorker"


def worker_options(place: Placement, nthreads: int, memory_limit: str, **more) -> dict:
    """Keyword arguments of an in-process :class:`distributed.Worker` for ``place`` (its HTTP
    server on loopback unless configured: :mod:`hpcgpu.worker.http`)."""
    from hpcgpu.worker.http import worker_http_address

    return dict(name=place.name, nthreads=nthreads, memory_limit=memory_limit,
                resources={"GPU": 1}, preload=["hpcgpu.worker.preload"],
                **{"dashboard_address": worker_http_address(), **more})


def start_own_worker(command: WorkerCommand, env_extra: Mapping[str, str] | None = None) -> Child:
    """Rank 0's worker on rank 0's GPU: a ``python -m hpcgpu.worker`` child process, which
    ends when rank 0 ends (an ``MPI_Abort`` kills rank 0, not its child's session)."""
    env = {**os.environ, **(env_extra or {})}
    return start_child("rank-0 worker", command.argv(sys.executable), env=env, die_with_parent=True)


def exit_code_of(exc: BaseException | None) -> int:
    """The exit code a process ending with ``exc`` has.

    Examples
    --------
    >>> exit_code_of(None), exit_code_of(SystemExit(4)), exit_code_of(SystemExit("bye"))
    (0, 4, 1)
    >>> exit_code_of(SystemExit()), exit_code_of(ValueError()), exit_code_of(KeyboardInterrupt())
    (0, 1, 130)
    """
    if exc is None:
        return 0
    if isinstance(exc, SystemExit):
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        return 1
    if isinstance(exc, KeyboardInterrupt):
        return 130
    return 1


#: The exit code rank 0's client ended with, recorded on every worker before the end.
RECORDED_EXIT_CODE: list[int] = []


def record_exit_code(code: int) -> None:
    """Run on every worker (``client.run``) just before rank 0 closes the cluster."""
    RECORDED_EXIT_CODE[:] = [code]


def close_clients_of(address: str) -> None:
    """Close every client of this process connected to ``address`` (the script's own, left
    open as scripts do) before that scheduler closes: a client whose scheduler goes first
    tries to reconnect, and its cancelled reconnect ends in the log as two tracebacks."""
    from distributed import Client

    for client in list(Client._instances):
        scheduler = getattr(client, "scheduler", None)
        if client.status in ("running", "connecting") and getattr(scheduler, "address", None) == address:
            try:
                client.close(timeout=10)
            except Exception:  # noqa: BLE001 - the scheduler closes next in any case
                pass
