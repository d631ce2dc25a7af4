"""The MPI bootstrap: ``hpcgpu.mpi.initialize()``, with dask-mpi's signature and roles improved.

dask-mpi spends rank 0 on the scheduler and rank 1 on the client, two GPUs idle
(dask-mpi#29), and its ranks do not exit with the script's exit code (dask-mpi#58).
Here rank 0 runs the client code, the scheduler (in a background event-loop thread) and a
worker on its own GPU (a child process); every other rank runs one worker on its GPU.
The scheduler address and the temporary TLS certificate travel over MPI; each worker
pins its GPU by its node-local rank (``MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)``).
When rank 0 is done, :func:`shutdown` closes the cluster and broadcasts the exit code, and
every rank exits with it.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import socket
import sys
import traceback

import dask

from hpcgpu.mpi.idle import idle_bcast, wait_for_every_rank
from hpcgpu.network.routed import scheduler_host
from hpcgpu.system.closelog import quiet_expected_close
from hpcgpu.system.scratch import scratch_directory
from hpcgpu.runner import ranks
from hpcgpu.runner.dashboard import DEFAULT_DASHBOARD, scheduler_dashboard_message
from hpcgpu.system.threadsignals import born_blocked
from hpcgpu.worker.nannies import close_workers_then_scheduler
from hpcgpu.worker.placement import physical_gpu, placement_from_env, shared_gpu_error
from hpcgpu.worker.startfailure import wait_for_workers_or_exit
from hpcgpu.jobspec.worker_command import WorkerCommand

__all__ = ["initialize", "shutdown", "node_placement", "check_gpus", "mpi"]

#: What rank 0 holds while the cluster runs (None elsewhere and before initialize()).
_STATE: dict = {}


def node_placement(comm) -> tuple[int, int]:
    """(node index, node-local rank) of this rank, from MPI alone.

    Ranks that share memory are one node; nodes are numbered in the order of their
    lowest world rank.
    """
    node, local_rank, _ = _node_layout(comm)
    return node, local_rank


def mpi():
    """mpi4py's ``MPI`` module, or an ImportError that says which extra installs it."""
    try:
        from mpi4py import MPI
    except ImportError as exc:
        raise ImportError(
            f"hpcgpu.mpi needs mpi4py ({exc}): pip install 'hpcgpu[mpi]', with the site's MPI "
            "loaded first (module load ...) so that mpi4py is built against it"
        ) from None
    return MPI


def _node_layout(comm) -> tuple[int, int, int]:
    """(node index, node-local rank, ranks on the node)."""
    MPI = mpi()
    wait_for_every_rank(comm)  # its first collective: the ranks come at different times
    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=comm.Get_rank())
    local_rank, local_size = local.Get_rank(), local.Get_size()
    leaders = comm.Split(0 if local_rank == 0 else MPI.UNDEFINED, key=comm.Get_rank())
    node = leaders.Get_rank() if leaders != MPI.COMM_NULL else None
    node = local.bcast(node, root=0)
    if leaders != MPI.COMM_NULL:
        leaders.Free()
    local.Free()
    return node, local_rank, local_size


def check_gpus(comm, node: int, local_rank: int, local_size: int) -> None:
    """Raise ``ValueError`` on every rank, before anything starts, where two ranks would
    share a GPU or a rank has none of its own (more ranks on a node than GPUs)."""
    env = {**os.environ, "HPCGPU_NODE_RANK": str(node), "HPCGPU_LOCAL_RANK": str(local_rank),
           "HPCGPU_LOCAL_SIZE": str(local_size)}
    key, error = None, None
    try:
        gpu = placement_from_env(None, env).gpu
        key = (node, physical_gpu(gpu, env))
    except ValueError as exc:
        error = str(exc)
    # gather + bcast: only rank 0 talks to each rank (as the address broadcast does anyway)
    everything = comm.gather((comm.Get_rank(), key, error), root=0)
    message = comm.bcast(shared_gpu_error(everything) if everything else None, root=0)
    if message:
        raise ValueError(message)


def _security(pems: dict | None):
    if pems is None:
        return None
    from distributed.security import Security

    return Security(require_encryption=True, tls_ca_file=pems["ca"],
                    tls_client_cert=pems["cert"], tls_client_key=pems["key"],
                    tls_worker_cert=pems["cert"], tls_worker_key=pems["key"],
                    tls_scheduler_cert=pems["cert"], tls_scheduler_key=pems["key"])


def _shared_security(comm, security: bool):
    """``(tls, Security)``: rank 0's temporary certificate, in memory only (no file to leave
    behind when a rank is killed), sent to every rank; ``(None, None)`` without ``security``."""
    tls = pems = None
    if comm.Get_rank() == 0 and security:
        from hpcgpu.runner.security import temporary_tls

        tls = temporary_tls()
        pems = {"ca": tls.ca_file, "cert": tls.cert, "key": tls.key}
    return tls, _security(idle_bcast(comm, pems))


async def _run_worker(address: str, options: dict, worker_class: str) -> None:
    from distributed.utils import import_term

    async with import_term(worker_class)(address, **options) as worker:
        await worker.finished()


def _start_rank0(security, options: dict):
    """Scheduler on a background event loop (this thread keeps the client code)."""
    from distributed import Scheduler
    from distributed.utils import LoopRunner, sync

    from hpcgpu.network.colocate import CoLocateRoots

    loop_runner = LoopRunner(asynchronous=False)
    with born_blocked():  # the loop's thread, and the threads it starts: stop signals to this one
        loop_runner.start()

    quiet_expected_close()

    async def start():
        return await Scheduler(security=security, **{"plugins": [CoLocateRoots()], **options})

    scheduler = sync(loop_runner.loop, start)
    message = scheduler_dashboard_message(scheduler, options["dashboard"] and options["dashboard_address"])
    if message:
        print(f"hpcgpu.mpi: {message}", file=sys.stderr, flush=True)
    return loop_runner, scheduler


def _scheduler_options(comm, interface, protocol, dashboard, dashboard_address) -> dict:
    """Rank 0's scheduler's options. Every rank calls it: without ``interface`` (the same on
    every rank) it gathers the ranks' hosts, toward which the scheduler listens on a node
    without a route out (:mod:`hpcgpu.network.routed`)."""
    hosts = comm.allgather(socket.gethostname()) if interface is None else None
    host = scheduler_host(hosts) if hosts is not None and comm.Get_rank() == 0 else None
    return dict(port=0, host=host, interface=interface, protocol=protocol, dashboard=dashboard,
                dashboard_address=dashboard_address)


def initialize(interface=None, nthreads=1, local_directory=None, memory_limit="auto",
               nanny=False, dashboard=True, dashboard_address=DEFAULT_DASHBOARD, protocol=None,
               worker_class=ranks.GPU_WORKER, worker_options=None, comm=None, exit=True,
               security=True, wait_for_workers=300.0):
    """Make the ranks of this MPI job a Dask cluster with one worker per rank's GPU.

    Same parameters as ``dask_mpi.initialize`` (``nanny`` is accepted and ignored: rank 0's
    worker already has one, and a nanny would re-import the script on other ranks), plus
    ``security``: ``True`` (default) for a temporary certificate sent over MPI, and
    ``wait_for_workers``: seconds rank 0 waits for one worker per rank before it returns
    (``None``: do not wait).

    Returns
    -------
    bool
        True on rank 0, which goes on to run the client code. Other ranks serve as workers
        and then, with ``exit=True``, exit with rank 0's exit code; with ``exit=False`` they
        return False.

    Examples
    --------
    >>> from hpcgpu.mpi import initialize  # doctest: +SKIP
    >>> initialize()                       # under mpirun -n 4: rank 0 continues  # doctest: +SKIP
    >>> from distributed import Client     # doctest: +SKIP
    >>> Client().submit(sum, [1, 2], resources={"GPU": 1}).result()  # doctest: +SKIP
    3
    """
    comm = comm or mpi().COMM_WORLD
    node, local_rank, local_size = _node_layout(comm)
    check_gpus(comm, node, local_rank, local_size)
    rank = comm.Get_rank()
    with abort_on_error(comm):  # from here an error is one rank's: the others would wait in bcast
        tls, sec = _shared_security(comm, security)
        scheduler_options = _scheduler_options(comm, interface, protocol or ("tls" if sec else None),
                                               dashboard, dashboard_address)
        address = None
        if rank == 0:
            loop_runner, scheduler = _start_rank0(sec, scheduler_options)
            address = scheduler.address
        address = idle_bcast(comm, address)  # rank 0 starts the scheduler meanwhile
        common = dict(nthreads=nthreads, memory_limit=memory_limit, local_directory=local_directory or scratch_directory())
        if rank == 0:
            _become_client(comm, address, tls, loop_runner, scheduler, node, local_rank, common)
    if rank == 0:
        if wait_for_workers:
            with abort_on_error(comm):
                _wait_for(scheduler, comm.Get_size(), wait_for_workers, _STATE["worker"])
        return True
    return _serve_as_worker(comm, address, sec, node, local_rank, common, interface,
                            worker_class, worker_options, exit)


@contextlib.contextmanager
def abort_on_error(comm):
    """Turn an exception on this rank into ``MPI_Abort`` of every rank, after saying it.

    An exception that only one rank raises between collective calls leaves the other ranks
    waiting in their next collective, and this rank waiting in ``MPI_Finalize`` at exit:
    the job hangs until its walltime (mpi4py's own ``python -m mpi4py`` does the same).
    """
    try:
        yield
    except Exception as exc:
        print(f"hpcgpu.mpi: error on rank {comm.Get_rank()}: {exc}", file=sys.stderr, flush=True)
        traceback.print_exc()
        sys.stderr.flush()
        comm.Abort(1)


def _become_client(comm, address, tls, loop_runner, scheduler, node, local_rank, common):
    config = {"scheduler-address": address}
    if tls is not None:
        config.update(tls.client_config())
    dask.config.set(config)
    command = WorkerCommand(
        scheduler=address, nthreads=common["nthreads"], memory_limit=common["memory_limit"],
        local_directory=common["local_directory"], death_timeout=60,
    )
    # Its place comes from MPI, not from the launcher's variables; its certificate through
    # its environment (dask configuration), which only this user can read.
    worker = ranks.start_own_worker(command, {"HPCGPU_NODE_RANK": str(node),
                                              "HPCGPU_LOCAL_RANK": str(local_rank),
                                              **(tls.environment() if tls else {})})
    _STATE.update(comm=comm, loop_runner=loop_runner, scheduler=scheduler, worker=worker)
    atexit.register(shutdown)


def _wait_for(scheduler, n: int, timeout: float, own_worker) -> None:
    # rank 0's worker writes to rank 0's own output: no log to quote
    wait_for_workers_or_exit(lambda: len(scheduler.workers), n, own_worker.popen.poll,
                             lambda: "rank 0's worker: see its messages above", timeout, 0.1)


def _serve_as_worker(comm, address, sec, node, local_rank, common, interface, worker_class,
                     worker_options, exit):
    place = ranks.pin_gpu(local_rank=local_rank, node=node)
    options = ranks.worker_options(place, common["nthreads"], common["memory_limit"],
                                   security=sec, interface=interface,
                                   local_directory=common["local_directory"])
    options.update(worker_options or {})
    with abort_on_error(comm):  # a worker that cannot start: rank 0 would wait for it
        asyncio.run(_run_worker(address, options, worker_class))
    code = idle_bcast(comm)  # rank 0 shuts the cluster down meanwhile
    if exit:
        sys.exit(code)
    return False


def shutdown(exit_code: int = 0) -> None:
    """On rank 0: close the workers and the scheduler, tell every rank ``exit_code``.

    Runs by itself at the end of the script (``atexit``, code 0); call it yourself (or run
    the script with ``python -m hpcgpu.mpi``) for another exit code. Idempotent.
    """
    if not _STATE:
        return
    state = dict(_STATE)
    _STATE.clear()
    from distributed.utils import sync

    ranks.close_clients_of(state["scheduler"].address)
    sync(state["loop_runner"].loop, close_workers_then_scheduler, state["scheduler"],
         "hpcgpu.mpi shutdown")
    worker = state["worker"]
    if not worker.wait_group(10):
        worker.stop(grace=5)
    state["loop_runner"].stop()
    idle_bcast(state["comm"], exit_code)
