"""Import what the first array graph needs while a server starts, not in the first compute.

A scheduler or worker in a process of its own imports ``dask.array`` and
:mod:`hpcgpu.array.optimization` when the first graph of hpcgpu arrays reaches it (the
scheduler runs the optimiser, a worker unpickles the fused tasks): about a second of the
first ``compute()`` of every batch job, paid once more on each worker. Here the server
imports them while it starts, before it takes any message, as the other servers of the
cluster start beside it. Not in a thread beside the server: a graph that arrived while
that thread imported ``dask.array`` imported parts of it at the same time, and Python,
to break the two threads' wait on each other's module locks, handed one of them the
half-initialised module (``cannot import name 'arange' from partially initialized module
'dask.array.creation'``); the worker died. Nothing here touches CUDA. It runs only on
hosts with an NVIDIA driver (:func:`gpu_host`): graphs of GPU arrays are the ones that
pay, and a CPU-only cluster keeps its start-up CPU.

Used as a Dask preload (``--preload hpcgpu.system.warmup``) by ``hpcgpu run``'s scheduler
and by the scheduler job of ``scheduler_in_job``, and started by every hpcgpu worker's
preload; a plain ``dask scheduler`` gets it with that option. Those schedulers also freeze
their start-up objects (:func:`freeze_startup_objects`), as hpcgpu's workers do.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os

__all__ = ["MODULES", "gpu_host", "import_all", "freeze_startup_objects", "dask_setup"]

logger = logging.getLogger("distributed.hpcgpu")

#: what a first graph of hpcgpu arrays imports on a scheduler and on a worker
MODULES = ("dask.array", "hpcgpu.array.optimization")


def import_all(modules: tuple[str, ...] = MODULES) -> None:
    """Import ``modules`` here and now; one that fails is left to the first graph.

    >>> import_all(("json",)); import sys; "json" in sys.modules
    True
    """
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - the first graph will raise it where it matters
            logger.debug("hpcgpu warm-up: importing %s failed: %s", name, error)


def gpu_host() -> bool:
    """Whether this host has an NVIDIA driver (its control device), read without NVML or CUDA."""
    return os.path.exists("/dev/nvidiactl")


def freeze_startup_objects() -> int:
    """Keep what the process holds now out of the garbage collector's full collections.

    A full collection walks every tracked object. A GPU worker holds about 210,000 of them
    after start-up (modules, CuPy, RMM, Dask), and on an H200 host each full collection
    took 0.09-0.13 s, during which no task started; frozen, 0.02-0.04 s. Those objects
    live as long as the process, so walking them frees nothing. distributed's own
    ``dask worker`` command tunes its collector too. Returns the number of frozen objects.

    Examples
    --------
    >>> import gc
    >>> freeze_startup_objects() > 0 and gc.get_freeze_count() > 0
    True
    >>> gc.unfreeze()
    """
    gc.collect()  # garbage frozen now would never be freed
    gc.freeze()
    return gc.get_freeze_count()


def dask_setup(server) -> None:
    """As a Dask preload: import :data:`MODULES` on a GPU host, before the server takes
    its first message (see the module's note for why not in a thread); a scheduler then
    freezes what it holds (:func:`freeze_startup_objects`), as hpcgpu's workers do: this
    preload runs in schedulers of their own process, where the optimiser's graphs would
    otherwise make each full collection walk the start-up objects too."""
    if gpu_host():
        import_all(MODULES)
    from distributed import Scheduler

    if isinstance(server, Scheduler):
        freeze_startup_objects()
