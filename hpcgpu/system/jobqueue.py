"""dask-jobqueue's classes, imported without touching process-wide state or the home directory.

Importing the ``dask_jobqueue`` package has two side effects that are not hpcgpu's to make:

- ``dask_jobqueue.runner`` (imported by the package through ``dask_jobqueue.slurm``)
  replaces the SIGINT handler with ``sys.exit()``, so that Ctrl-C would exit 0 and
  ``except KeyboardInterrupt`` would never run. The package cannot be imported without
  that module, so the handler in place before is put back right after the import.
- ``dask_jobqueue.config`` runs :func:`dask.config.ensure_file`, which copies its
  ``jobqueue.yaml`` into ``dask.config.PATH`` (``~/.config/dask``) unless that path is an
  existing file ("never overwrite", its documented rule). ``PATH`` names the packaged
  yaml itself while importing; the defaults are registered all the same.
"""

from __future__ import annotations

import importlib.util
import signal
import sys
import threading
from contextlib import contextmanager

import dask.config

__all__ = ["Job", "JobQueueCluster", "BaseRunner", "Role"]


@contextmanager
def _side_effects_undone():
    main = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGINT) if main else None
    path = dask.config.PATH
    dask.config.PATH = importlib.util.find_spec("dask_jobqueue").submodule_search_locations[0] + "/jobqueue.yaml"
    try:
        yield
    finally:
        dask.config.PATH = path
        if main:
            signal.signal(signal.SIGINT, handler)


if "dask_jobqueue" not in sys.modules:
    with _side_effects_undone():
        import dask_jobqueue  # noqa: F401

from dask_jobqueue.core import Job, JobQueueCluster  # noqa: E402
from dask_jobqueue.runner import BaseRunner, Role  # noqa: E402
