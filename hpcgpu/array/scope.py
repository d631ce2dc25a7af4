"""Which graphs get hpcgpu's passes, and with which settings, wherever the scheduler runs.

Dask runs a collection's optimiser where the graph is materialised: on the scheduler,
which under ``hpcgpu run``, ``scheduler_in_job`` or a separate ``dask scheduler`` is
another process, with its own config and no client. So nothing the optimiser reads may
live in one process's memory: an hpcgpu array's mark travels in its layer
(:func:`mark_layer`), and :class:`~hpcgpu.array.optimization.ArrayOptimizer` carries the
client's settings (:class:`Settings`) when it is pickled with the graph.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import dask
from dask.highlevelgraph import HighLevelGraph

__all__ = ["mark_layer", "holds_hpcgpu_array", "Settings", "cluster_threads", "cluster_workers", "TASKS_PER_THREAD"]

#: names of the arrays hpcgpu.array made, for graphs that reach the optimiser as plain dicts
#: in this process; a HighLevelGraph carries the mark on the array's layer (:func:`mark_layer`)
_MARKED: set = set()

#: fused tasks per thread of the cluster that ``fuse-width: auto`` aims at: fewer, larger
#: tasks pay less per-task cost, more keep every GPU busy to the end. Array-sum on 4 x H100,
#: best of 3, every row in one run (benchmarks/results/h100x4/tasks_per_thread.jsonl):
#: 4 / 8 / 16 per thread took 0.79 / 0.71 / 0.80 s on 1 GPU, 0.55 / 0.54 / 0.62 s on 2 and
#: 0.45 / 0.42 / 0.70 s on 4
TASKS_PER_THREAD = 8

#: the key of the mark in a layer's ``collection_annotations``
_LAYER_MARK = "hpcgpu.array"


def mark_layer(array) -> None:
    """Mark ``array`` (a :class:`dask.array.Array`) as hpcgpu's: in its layer's
    ``collection_annotations`` (metadata Dask itself only displays), which travel with the
    graph, and by name for graphs that reach the optimiser as plain dicts in this process.

    Examples
    --------
    >>> import dask.array as da
    >>> x = da.ones(4, chunks=2, name="marked-by-scope")
    >>> mark_layer(x)
    >>> holds_hpcgpu_array((x + 1).__dask_graph__())
    True
    """
    _MARKED.add(array.name)
    layer = array.dask.layers.get(array.name) if isinstance(array.dask, HighLevelGraph) else None
    if layer is not None:
        layer.collection_annotations = {**(layer.collection_annotations or {}), _LAYER_MARK: True}


def holds_hpcgpu_array(dsk, scope: str | None = None) -> bool:
    """Whether the graph holds an array of :func:`mark`, or the scope is every array."""
    if (scope or dask.config.get("hpcgpu.array.scope", "hpcgpu")) == "all":
        return True
    if isinstance(dsk, HighLevelGraph):
        return any((layer.collection_annotations or {}).get(_LAYER_MARK) for layer in dsk.layers.values()) \
            or not _MARKED.isdisjoint(dsk.layers)
    return any((k[0] if isinstance(k, tuple) else k) in _MARKED for k in dsk)


@dataclass(frozen=True)
class Settings:
    """What the optimiser reads, as the client had it when it sent the graph.

    Parameters
    ----------
    width : int or "auto"
        ``hpcgpu.array.fuse-width``: leaves per fused task, ``auto``, or < 2 for off.
    pushdown : bool
        ``hpcgpu.array.slice-pushdown``.
    scope : str
        ``hpcgpu.array.scope``: ``hpcgpu`` (graphs holding an hpcgpu array) or ``all``.
    fuse_active : bool or None
        Dask's ``optimization.fuse.active`` (False turns hpcgpu's passes off too).
    threads : int
        Worker threads of the client's cluster, for ``width="auto"``.
    fused_kernels : object
        ``hpcgpu.array.fused-kernels`` (:func:`~hpcgpu.array.fused.fused_backends`).
    tasks_per_thread : int
        ``hpcgpu.array.tasks-per-thread``: fused tasks per worker thread that ``width="auto"``
        aims at (:func:`~hpcgpu.array.optimization.auto_width`).
    collective : str
        ``hpcgpu.array.collective``: ``auto``, ``always`` or ``never``, for Dask's own
        ``x @ y`` and ``x.rechunk(...)`` (:mod:`hpcgpu.array.plane.idioms`).
    workers : int
        Workers of the client's cluster (0: no distributed client), for ``auto``.

    Examples
    --------
    >>> with dask.config.set({"hpcgpu.array.fuse-width": 8}):
    ...     Settings.current().width
    8
    """

    width: int | str = "auto"
    pushdown: bool = True
    scope: str = "hpcgpu"
    fuse_active: bool | None = None
    threads: int = 1
    fused_kernels: Any = "auto"
    tasks_per_thread: int = TASKS_PER_THREAD
    collective: str = "auto"
    workers: int = 0

    @classmethod
    def current(cls) -> "Settings":
        """The settings of this process's Dask config and default client."""
        width = dask.config.get("hpcgpu.array.fuse-width", "auto")
        return cls(width=width if width == "auto" else int(width),
                   pushdown=bool(dask.config.get("hpcgpu.array.slice-pushdown", True)),
                   scope=str(dask.config.get("hpcgpu.array.scope", "hpcgpu")),
                   fuse_active=dask.config.get("optimization.fuse.active", None),
                   threads=cluster_threads(),
                   fused_kernels=dask.config.get("hpcgpu.array.fused-kernels", "auto"),
                   tasks_per_thread=int(dask.config.get("hpcgpu.array.tasks-per-thread", TASKS_PER_THREAD)),
                   collective=str(dask.config.get("hpcgpu.array.collective", "auto")),
                   workers=cluster_workers())


def _identity() -> dict:
    """The default Dask client's last word from its scheduler (no round trip here); empty
    without distributed or a client (the local scheduler)."""
    try:
        from distributed import default_client

        return getattr(default_client(), "_scheduler_identity", None) or {}
    except (ImportError, ValueError):
        return {}


def cluster_threads() -> int:
    """Worker threads of the default Dask client's cluster, or this machine's cores where
    there is no client."""
    return int(_identity().get("total_threads") or 0) or (os.cpu_count() or 1)


def cluster_workers() -> int:
    """Workers of the default Dask client's cluster; 0 without a client."""
    identity = _identity()
    return int(identity.get("n_workers") or len(identity.get("workers") or ()))
