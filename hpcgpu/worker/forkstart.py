"""LocalGPUCluster's worker processes forked from a fork server instead of spawned.

A spawned worker process is a fresh interpreter that imports distributed, dask, numpy and
hpcgpu's worker modules again: about a CPU second per worker, for every worker of every
cluster. The nannies of a ``LocalGPUCluster`` (:class:`ForkServerNanny`) start theirs from
Python's fork server instead (``multiprocessing``'s ``forkserver``): one interpreter per
process imports :data:`PRELOAD` once, then forks a worker process per request. Nothing
that touches CUDA is imported there, so each worker still sets its own
``CUDA_VISIBLE_DEVICES`` before anything initialises CUDA.

The server was started by the first cluster of the process; what a spawned worker process
would take from the process at its start, this one takes too (:class:`ParentStateProcess`):
the environment as it is then (variables set or deleted since the server started
included) and the standard output and error it has then. A setting that the server read
once, when it started and imported its modules (``DASK_*``, BLAS threads: :data:`READ_AT_IMPORT`),
and that has changed since, cannot be taken by a fork: that worker process is spawned. The
main module is imported again as ``__mp_main__`` in both ways (``multiprocessing`` does
that), hence the same ``if __name__ == "__main__":`` guard.

Only these nannies: distributed's ``get_mp_context``, in its nanny and process modules, is
wrapped (:func:`install`) to return this context while a :class:`ForkServerNanny` starts its
worker process, and distributed's own otherwise. A context variable says which, so another
nanny's task in the same event loop (a plain ``LocalCluster``'s) keeps distributed's method,
and dask's configuration is never changed.
"""

from __future__ import annotations

import contextvars
import os
import threading
from multiprocessing import context as mp_context
from multiprocessing import reduction

from distributed import Nanny

from hpcgpu.worker.nannies import FORKSERVER_PRELOAD
from hpcgpu.worker.startfailure import OneStartAtATime, StopsWhileStarting

__all__ = ["PRELOAD", "READ_AT_IMPORT", "ParentStateProcess", "ForkServerNanny", "read_at_import", "spawn_needed",
           "take_parent_state", "start_method", "fork_started", "install"]

#: what the fork server imports once: the batch fork server's list and this module (each
#: worker process's ``multiprocessing`` object is one of its classes)
PRELOAD = (*FORKSERVER_PRELOAD, "hpcgpu.worker.forkstart")

#: what variables :func:`read_at_import` keeps begin with
READ_AT_IMPORT = ("DASK_", "PYTHON", "OMP_", "MKL_", "OPENBLAS_", "NPY_", "NUMPY_", "MALLOC_", "LD_",
                  "LC_", "LANG", "TZ", "HOME", "XDG_", "TMPDIR")

#: the context a nanny's worker process start is using; None: distributed's own
_STARTING: contextvars.ContextVar = contextvars.ContextVar("hpcgpu_forkstart", default=None)
_INSTALL = threading.Lock()


class ParentStateProcess(mp_context.ForkServerProcess):
    """A fork server's process that takes the environment and the standard output and
    error of the process that starts it, at its start, as a spawned process does; spawned
    where the fork server's imports saw other settings (:func:`spawn_needed`)."""

    def start(self) -> None:
        self._environ = dict(os.environ)  # after distributed's pre-spawn variables are set
        self._spawn = spawn_needed(self._environ)
        super().start()

    @staticmethod
    def _Popen(process_obj):
        if process_obj._spawn:
            from multiprocessing.popen_spawn_posix import Popen
        else:
            from multiprocessing.popen_forkserver import Popen
        return Popen(process_obj)

    def __getstate__(self) -> dict:
        # pickled while the request is made: each DupFd travels with it to the new process
        return {**self.__dict__, "_stdio": tuple(reduction.DupFd(fd) if _is_open(fd) else None
                                                 for fd in (1, 2))}

    def run(self) -> None:
        take_parent_state(self._environ, self._stdio)
        super().run()


def read_at_import(environ) -> dict:
    """The variables of ``environ`` that Python, the C library or the fork server's modules
    read once, when they start or are imported (dask's configuration and distributed's
    logging from ``DASK_*``, BLAS threads, the allocator, the locale, paths).

    Examples
    --------
    >>> read_at_import({"DASK_LOGGING__DISTRIBUTED": "error", "CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "1"})
    {'DASK_LOGGING__DISTRIBUTED': 'error', 'OMP_NUM_THREADS': '1'}
    """
    return {k: v for k, v in environ.items() if k.startswith(READ_AT_IMPORT)}


def spawn_needed(environ) -> bool:
    """Whether a worker process started with ``environ`` must be spawned: the running fork
    server started with other values of :func:`read_at_import`'s variables (Linux, where
    ``/proc`` shows them; elsewhere never)."""
    pid = _server_pid()
    if pid is None:
        return False
    if pid == -1:  # started or not, its environment cannot be read: a spawned start is right
        return True
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            raw = f.read()
    except OSError:
        return False
    server = dict(os.fsdecode(item).split("=", 1) for item in raw.split(b"\0") if b"=" in item)
    return read_at_import(environ) != read_at_import(server)


def _server_pid() -> int | None:
    """The fork server's pid; None before it starts. multiprocessing keeps it in a private
    attribute: -1 on a Python that keeps it elsewhere."""
    from multiprocessing import forkserver

    return getattr(getattr(forkserver, "_forkserver", None), "_forkserver_pid", -1)


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def take_parent_state(environ: dict, stdio: tuple) -> None:
    """In the new process, before its target runs: ``environ`` as the whole environment,
    and the received descriptors as its standard output and error."""
    os.environ.clear()
    os.environ.update(environ)
    for target, received in zip((1, 2), stdio):
        if received is not None:
            fd = received.detach()
            if fd != target:  # a spawned process has it there already
                os.dup2(fd, target)
                os.close(fd)


class _Context(mp_context.ForkServerContext):
    Process = ParentStateProcess


_CONTEXT = _Context()


class ForkServerNanny(OneStartAtATime, StopsWhileStarting, Nanny):
    """distributed's ``Nanny``, whose worker process (at start and each restart) comes
    from the fork server as a :class:`ParentStateProcess`."""

    async def instantiate(self):
        token = _STARTING.set(_CONTEXT)
        try:
            return await super().instantiate()
        finally:
            _STARTING.reset(token)


def start_method() -> str:
    """How a ``LocalGPUCluster``'s nannies start worker processes: a method set in
    ``distributed.worker.multiprocessing-method`` other than distributed's default
    ``spawn`` (distributed's own handling), else ``hpcgpu.local-multiprocessing-method``
    (``forkserver`` by default, or ``spawn``).

    Examples
    --------
    >>> import dask
    >>> with dask.config.set({"hpcgpu.local-multiprocessing-method": "spawn"}):
    ...     start_method()
    'spawn'
    >>> with dask.config.set({"hpcgpu.local-multiprocessing-method": "fork"}):
    ...     start_method()
    Traceback (most recent call last):
    ...
    ValueError: hpcgpu.local-multiprocessing-method='fork': use forkserver or spawn
    """
    import dask

    configured = dask.config.get("distributed.worker.multiprocessing-method", "spawn")
    if configured != "spawn":
        return configured
    method = dask.config.get("hpcgpu.local-multiprocessing-method", None) or "forkserver"
    if method not in ("forkserver", "spawn"):
        raise ValueError(f"hpcgpu.local-multiprocessing-method={method!r}: use forkserver or spawn")
    return method


def fork_started(nanny: type) -> type:
    """The nanny class for a ``LocalGPUCluster``: :class:`ForkServerNanny` in place of
    distributed's ``Nanny`` where :func:`start_method` says ``forkserver`` (and this
    platform and distributed allow it); any other class as it is."""
    if nanny is not Nanny or start_method() != "forkserver":
        return nanny
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods() or not install():
        return nanny
    if _server_pid() is None:  # not started yet: ours to choose
        import importlib.util

        _CONTEXT.set_forkserver_preload([m for m in PRELOAD if importlib.util.find_spec(m)])
    return ForkServerNanny


def install() -> bool:
    """Wrap ``get_mp_context`` where distributed's nanny and process modules call it (once);
    False, and nothing changed, where they do not have it."""
    import distributed.nanny
    import distributed.process

    modules = (distributed.nanny, distributed.process)
    with _INSTALL:
        if not all(callable(getattr(m, "get_mp_context", None)) for m in modules):
            return False
        for module in modules:
            if not hasattr(module.get_mp_context, "hpcgpu_original"):
                module.get_mp_context = _dispatching(module.get_mp_context)
    return True


def _dispatching(original):
    def get_mp_context():
        return _STARTING.get() or original()

    get_mp_context.hpcgpu_original = original
    get_mp_context.__doc__ = original.__doc__
    return get_mp_context
