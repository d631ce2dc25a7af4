"""Imported last by a fork server: what every forked worker would do after the fork, done
once before it.

A worker process forked from a fork server (:mod:`hpcgpu.worker.forkedserver`, Python's
``forkserver`` with :data:`~hpcgpu.worker.nannies.FORKSERVER_PRELOAD`) still imported the
worker's HTTP routes (``prometheus_client`` with them), ``numpy.random`` and asyncio's
tornado glue, read the versions it reports from package metadata, and made a full garbage
collection of the server's 80,000 start-up objects (the worker's
:func:`~hpcgpu.system.warmup.freeze_startup_objects`): about 0.07 CPU-s of the 0.11 from
a worker's fork to its registration on a CPU host, on every GPU worker of every job too.
Here the server does them once; it then freezes its objects (:func:`gc.freeze`, as
Python's documentation advises before a ``fork()`` without ``exec()``): a worker's
collections skip them, and do not touch (copy) the memory pages it shares with the server.

Importing this module does it (a fork server's preload can only import), hence private:
only the fork servers import it, never ``import hpcgpu`` (nor pytest's doctest collection,
``conftest.py``). Nothing here touches CUDA.
"""

from __future__ import annotations

import gc
import importlib

import dask

from hpcgpu.system.versions import local_versions

__all__ = ["AFTER_FORK", "prepare"]

#: what each forked worker imported after the fork, besides its HTTP routes
AFTER_FORK = ("numpy.random", "tornado.platform.asyncio", "multiprocessing.synchronize",
              "multiprocessing.popen_forkserver")


def prepare() -> None:
    """Import what a worker imports after the fork, fill the version caches it reads when
    it registers, then collect and freeze this process's objects."""
    from distributed.versions import get_versions

    for name in (*AFTER_FORK, *dask.config.get("distributed.worker.http.routes", [])):
        try:
            importlib.import_module(name)
        except ImportError:  # an optional route (prometheus_client missing): the worker skips it too
            pass
    get_versions()  # cached per package; platform.uname() too
    local_versions()
    gc.collect()  # garbage frozen now would never be freed
    gc.freeze()


prepare()
