"""Several GPU workers from one process: one nanny per GPU, each pinning its own worker.

With one launcher task per node, ``python -m hpcgpu.worker --gpus-per-node G`` runs
``dask worker --nworkers G`` in one process (G nannies, G worker processes), as dask-cuda's
``CUDAWorker`` does. ``dask worker`` gives all its nannies the same options, so the nanny
class it builds them from is swapped for one that adds each worker's GPU to that nanny's
``env``: the nanny sets it in its worker process before the worker (and CUDA) starts, and
sets it again in every process it restarts.

The nannies start their worker processes from a fork server (:func:`use_forkserver`) forked
from this process after its imports: one interpreter start-up per node, instead of a fresh
interpreter importing distributed per GPU.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Iterable

from hpcgpu.worker.placement import Placement

__all__ = ["gpu_environment", "pinned_nanny_class", "use_pinned_nannies", "use_forkserver",
           "stop_through_nannies", "close_workers_then_scheduler", "FORKSERVER_PRELOAD"]

#: what the fork server imports before it forks worker processes: distributed's own list
#: (``distributed.utils.get_mp_context``) less pandas, which a spawned worker does not import
#: at start either and which lies on the start-up's critical path, plus the GPU worker's
#: modules, and last what each worker would do after the fork (:mod:`hpcgpu.worker._forkready`).
#: No CUDA library: a process must not fork after CUDA is initialised.
FORKSERVER_PRELOAD = ("distributed", "dask", "msgpack", "cloudpickle", "tornado", "toolz",
                      "numpy", "lz4", "hpcgpu.worker.gpuworker", "hpcgpu.worker.preload",
                      "hpcgpu.worker._forkready")


def gpu_environment(place: Placement) -> dict[str, str]:
    """The variables that pin one worker process to its GPU and tell it its place.

    Examples
    --------
    >>> gpu_environment(Placement(node=1, local_rank=2, gpu="6", name="j-1-2"))
    {'CUDA_VISIBLE_DEVICES': '6', 'HPCGPU_GPU': '6', 'HPCGPU_NODE_RANK': '1', 'HPCGPU_LOCAL_RANK': '2'}
    """
    env = {"CUDA_VISIBLE_DEVICES": place.gpu} if place.gpu is not None else {}
    return {**env, "HPCGPU_GPU": place.gpu or "", "HPCGPU_NODE_RANK": str(place.node),
            "HPCGPU_LOCAL_RANK": str(place.local_rank)}


def pinned_nanny_class(placements: Iterable[Placement]) -> type:
    """A ``distributed.Nanny`` subclass that pins the worker named ``p.name`` to ``p.gpu``.

    Examples
    --------
    >>> cls = pinned_nanny_class([Placement(0, 0, "3", "j-0-0")])
    >>> cls.placements["j-0-0"].gpu, cls.__mro__[1].__name__
    ('3', 'Nanny')
    """
    from distributed import Nanny

    by_name = {p.name: p for p in placements}

    class PinnedNanny(Nanny):
        placements = by_name

        def __init__(self, *args, name=None, env=None, **kwargs):
            place = by_name.get(str(name))
            if place is None:  # dask worker named its nannies differently than expected
                raise RuntimeError(f"no GPU for the worker named {name!r}: expected one of "
                                   f"{', '.join(by_name)}")
            super().__init__(*args, name=name, env={**(env or {}), **gpu_environment(place)},
                             **kwargs)

    return PinnedNanny


def use_pinned_nannies(placements: list[Placement]) -> str:
    """Make ``dask worker`` build its nannies pinned; returns the ``--name`` to give it.

    ``dask worker --name P --nworkers G`` names its workers ``P-0`` .. ``P-(G-1)`` (just
    ``P`` when G is 1), so ``P`` is the placements' shared ``<job>-<node>`` prefix.
    """
    from distributed.cli import dask_worker

    dask_worker.Nanny = pinned_nanny_class(placements)
    if len(placements) == 1:
        return placements[0].name
    return placements[0].name.rsplit("-", 1)[0]


def use_forkserver(method: str | None, nworkers: int, protocol: str | None = None) -> str:
    """Choose how the nannies start worker processes; returns the method in use.

    ``method`` (the entry point's option) wins; then a method set in dask's configuration
    (``distributed.worker.multiprocessing-method``) other than distributed's default
    ``spawn``; then ``forked-server``: a fork server forked from this process once it has
    imported :data:`FORKSERVER_PRELOAD` (:mod:`hpcgpu.worker.forkedserver`), so a node pays
    one interpreter start-up and one import of distributed for all its GPUs, and a nanny of
    one GPU does not start a second interpreter for its worker. With UCX, whose library
    this process may have loaded, ``forkserver`` (Python's server, a second interpreter that
    imports them again) for several workers, ``spawn`` for one; those new interpreters
    import nothing from the job's directory either (:func:`~hpcgpu.system.pymain.children_drop_cwd`).
    Call it before any thread or listener exists in this process.
    """
    import multiprocessing

    import dask
    import distributed.utils

    from hpcgpu.network import UCX_PROTOCOLS
    from hpcgpu.system.pymain import children_drop_cwd

    children_drop_cwd()

    configured = dask.config.get("distributed.worker.multiprocessing-method")
    ucx = (protocol or "").lower() in UCX_PROTOCOLS
    chosen = method or (configured if configured != "spawn" else "forked-server" if not ucx
                        else "spawn" if nworkers < 2 else "forkserver")
    chosen = _spawn_where_the_socket_does_not_fit(chosen)
    context = "forkserver" if chosen == "forked-server" else chosen
    dask.config.set({"distributed.worker.multiprocessing-method": context})
    if context == "forkserver":
        # find_spec, not import: distributed's own check imports pandas into this process
        preload = [m for m in FORKSERVER_PRELOAD if importlib.util.find_spec(m) is not None]
        multiprocessing.get_context("forkserver").set_forkserver_preload(preload)
        distributed.utils._forkserver_preload_set = True  # keep this list, not distributed's
        if chosen == "forked-server":
            from hpcgpu.worker.forkedserver import start_forked_server

            if start_forked_server(preload) is None:  # Python's own server starts instead
                import logging

                logging.getLogger("hpcgpu.worker").info(
                    "fork server: Python's (a thread or a server already runs in the launcher)")
                chosen = _spawn_where_the_socket_does_not_fit("forkserver")
                dask.config.set({"distributed.worker.multiprocessing-method": chosen})
    return chosen


#: what multiprocessing adds to TMPDIR for Python's fork server socket:
#: ``/pymp-XXXXXXXX/listener-XXXXXXXX``; Linux takes 107 bytes of path
_SERVER_SOCKET_SUFFIX, _UNIX_PATH_MAX = 32, 107


def _spawn_where_the_socket_does_not_fit(chosen: str) -> str:
    """``spawn`` instead of Python's ``forkserver`` where its socket path under TMPDIR would
    not fit (``OSError: AF_UNIX path too long``: every nanny failed to start its worker);
    any other method as it is. hpcgpu's ``forked-server`` keeps its socket elsewhere.

    >>> _spawn_where_the_socket_does_not_fit("forked-server")
    'forked-server'
    """
    import tempfile

    if chosen != "forkserver":
        return chosen
    if len(os.fsencode(tempfile.gettempdir())) + _SERVER_SOCKET_SUFFIX <= _UNIX_PATH_MAX:
        return chosen
    import logging

    logging.getLogger("hpcgpu.worker").warning(
        "TMPDIR=%s is too long for Python's fork server's socket: the nannies spawn their "
        "workers instead (a shorter TMPDIR lets them use it)", tempfile.gettempdir())
    return "spawn"


async def stop_through_nannies(nannies: Iterable[str], connection_args: dict) -> None:
    """Ask each nanny to close (``Nanny.close``: it stops its worker, then itself), from
    the process that owns the cluster, before the scheduler closes. A worker without a
    nanny is given by its own address: ``terminate`` closes a worker the same way.

    That is the clean way down: a worker the scheduler closes first keeps heart-beating
    into a closed connection (tracebacks in the job's log), one told to close by the
    scheduler ends with distributed's ``Worker process died unexpectedly`` (its nanny's
    stop-queue thread is closed under it), and with UCX a nanny that unregisters from a
    closing scheduler can crash it (ucxx's listener callback after free). The nanny closes
    the connection instead of answering: that is success.
    """
    import asyncio

    from distributed.comm.core import CommClosedError
    from distributed.core import rpc

    async def stop(address: str) -> None:
        try:
            async with rpc(address, connection_args=connection_args, timeout=10) as nanny:
                await nanny.terminate(reason="cluster-close")
        except (CommClosedError, OSError):
            pass

    await asyncio.gather(*(stop(address) for address in nannies))


async def close_workers_then_scheduler(scheduler, reason: str, grace: float = 10.0) -> None:
    """Close an in-process scheduler the clean way: its workers first (through their
    nannies, or directly), then itself.

    A worker whose scheduler closes first logs a ``CommClosedError`` traceback from its
    batched stream, at the end of a run that went well (``hpcgpu.mpi`` and ``GPURunner``
    did).
    """
    import asyncio
    import time

    targets = [ws.nanny or ws.address for ws in scheduler.workers.values()]
    await stop_through_nannies(targets, scheduler.connection_args)
    deadline = time.monotonic() + grace
    while scheduler.workers and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    await scheduler.close(reason=reason)
