"""Import what the first array graph needs while a server starts, not in the first compute.

A scheduler or worker in a process of its own imports ``dask.array`` and
:mod:`hpcgpu.array.optimization` when the first graph of hpcgpu arrays reaches it (the
scheduler runs the optimiser, a worker unpickles the fused tasks): about a second of the
first ``compute()`` of every batch job, paid once more on each worker. Here a thread
imports them as soon as the server starts, while the rest of the cluster comes up;
Python's import lock makes a graph that arrives meanwhile wait for the same import, never
see half of it. Nothing here touches CUDA. It runs only on hosts with an NVIDIA driver
(:func:`gpu_host`): graphs of GPU arrays are the ones that pay, and a CPU-only cluster
keeps its start-up CPU.

Used as a Dask preload (``--preload hpcgpu.system.warmup``) by ``hpcgpu run``'s scheduler
and by the scheduler job of ``scheduler_in_job``, and started by every hpcgpu worker's
preload; a plain ``dask scheduler`` gets it with that option.
"""

from __future__ import annotations

import importlib
import logging
import os
import threading

from hpcgpu.system.threadsignals import start_thread

__all__ = ["MODULES", "gpu_host", "warm_up", "dask_setup"]

logger = logging.getLogger("distributed.hpcgpu")

#: what a first graph of hpcgpu arrays imports on a scheduler and on a worker
MODULES = ("dask.array", "hpcgpu.array.optimization")


def warm_up(modules: tuple[str, ...] = MODULES) -> threading.Thread:
    """Import ``modules`` in a daemon thread (born blocking the stop signals); returns it.

    Examples
    --------
    >>> warm_up(("json",)).join(timeout=10)
    >>> import sys; "json" in sys.modules
    True
    """
    return start_thread(threading.Thread(target=_import_all, args=(modules,), name="hpcgpu-warmup", daemon=True))


def _import_all(modules: tuple[str, ...]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - the first graph will raise it where it matters
            logger.debug("hpcgpu warm-up: importing %s failed: %s", name, error)


def gpu_host() -> bool:
    """Whether this host has an NVIDIA driver (its control device), read without NVML or CUDA."""
    return os.path.exists("/dev/nvidiactl")


def dask_setup(server) -> None:
    """As a Dask preload: start :func:`warm_up` on a GPU host."""
    if gpu_host():
        warm_up()
