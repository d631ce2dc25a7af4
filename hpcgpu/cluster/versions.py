"""Each joining worker's hpcgpu, dask and distributed against this process's.

A worker started from another environment, or from a container image
(:mod:`hpcgpu.jobspec.container`), may run other versions than the client: pickled tasks
then fail in ways that do not name the cause. distributed compares versions too, but says
so in the worker's log. Here the cluster reads the versions each hpcgpu worker reported when
it registered (:mod:`hpcgpu.system.versions`) from the worker-status stream, as the worker
joins, and logs one warning per worker naming both versions (``cluster.versions.problems``
keeps them).
"""

from __future__ import annotations

import logging
from typing import Callable

from hpcgpu.system.versions import local_versions, worker_mismatches

__all__ = ["VersionWatch"]

logger = logging.getLogger("hpcgpu.cluster")


class VersionWatch:
    """Compare the versions of joining workers with this process's, report each mismatch once.

    Examples
    --------
    >>> seen = []
    >>> watch = VersionWatch(seen.append)
    >>> mine = watch.mine
    >>> watch.watch({"tcp://h:1": {"name": "j-0-0", "hpcgpu": {"versions": dict(mine)}},
    ...              "tcp://h:2": {"name": "cpu-1"},  # not hpcgpu's worker: not checked
    ...              "tcp://h:3": {"name": "j-0-1", "hpcgpu": {"versions": {**mine, "dask": "1.0"}}}})
    >>> seen[0].startswith("worker 'j-0-1' at tcp://h:3 runs other versions than this client: dask 1.0")
    True
    >>> watch.watch({"tcp://h:3": {"name": "j-0-1", "hpcgpu": {}}}); len(seen)  # once per worker
    1
    """

    def __init__(self, report: Callable[[str], None] | None = None) -> None:
        self.mine = local_versions()
        #: worker name -> the message about it
        self.problems: dict[str, str] = {}
        self._report = report or (lambda message: logger.warning("%s", message))

    def watch(self, workers: dict) -> None:
        """Check the workers of a worker-status ``add`` message (address -> identity)."""
        for name, message in worker_mismatches(self.mine, workers).items():
            if name not in self.problems:
                self.problems[name] = message
                self._report(message)
