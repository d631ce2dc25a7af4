"""The collective data plane: rechunk, transpose, matmul and sort as exchanges among workers.

On Dask's task path every block that moves is a task and a message: Python, the
scheduler and the comm pay per block, so moving data between GPUs runs far below the
links' bandwidth. Here an operation is one barrier in the graph: each worker that holds
input hands its blocks to the plane, the scheduler orders the operation on all of them at
once, and the data crosses in one exchange per pair of workers, through NCCL between the
GPUs of one host (NVLink where there is one) or over the cluster's own comm (NumPy
chunks, several hosts). The output blocks come back as ordinary keys on the workers that
hold them.

``method`` (or ``hpcgpu.array.collective``: ``auto``, ``always``, ``never``) chooses:
``auto`` takes the plane where it pays (:data:`AUTO_MIN_WORKERS`), the task path
elsewhere.

Examples
--------
>>> import numpy as np, dask.array as da
>>> x = da.from_array(np.arange(16.0).reshape(4, 4), chunks=2)
>>> y = rechunk(x, (4, 1), method="collective")
>>> bool((y.compute() == x.compute()).all()), y.chunks
(True, ((4,), (1, 1, 1, 1)))
>>> bool((matmul(x, x, method="collective").compute() == x.compute() @ x.compute()).all())
True
"""

from __future__ import annotations

import logging

import dask
import dask.array as da
import numpy as np
from dask.array.core import normalize_chunks

from hpcgpu.array.scope import cluster_workers
from hpcgpu.array.plane.graph import collective
from hpcgpu.array.plane.ops import Matmul, Rechunk, Transpose

__all__ = ["rechunk", "transpose", "matmul", "sort", "argsort", "use_collective", "wanted", "AUTO_MIN_WORKERS"]

logger = logging.getLogger("distributed.hpcgpu.plane")
_TASK_METHODS = ("tasks", "p2p")
#: under ``auto``, the workers a distributed client needs for an operation to take the
#: plane, where it pays as measured on GPUs (docs/performance.md): matmul on any cluster
#: (one BLAS call per worker beats a task per block product even on one GPU), rechunk from
#: two workers; transpose stays on Dask's task path (Dask transposes each block where it
#: lies; the plane's own transpose, forced, places blocks beside their mirror); sort from
#: two workers (the task path gathers the sorted axis into one block); the tall-and-skinny
#: QR/SVD of :mod:`hpcgpu.array.linalg` on any cluster (one QR per worker: on 1, 2 and 4
#: H200 at 10 GB per GPU 0.65-0.75 s against Dask's TSQR's 0.70-0.90 s).
AUTO_MIN_WORKERS = {"matmul": 1, "rechunk": 2, "transpose": None, "sort": 2, "tsqr": 1}


def use_collective(method: str | None = None, kind: str = "rechunk") -> bool:
    """Whether an operation of ``kind`` takes the plane: ``method="collective"`` or
    ``"tasks"`` forces it; otherwise ``hpcgpu.array.collective`` (``auto``: a distributed
    client with :data:`AUTO_MIN_WORKERS` workers).

    >>> use_collective("tasks"), use_collective("collective")
    (False, True)
    """
    if method in _TASK_METHODS:
        return False
    if method == "collective":
        return True
    if method is not None:
        raise ValueError(f"method={method!r}: use 'collective', 'tasks' or 'p2p'")
    return wanted(kind, str(dask.config.get("hpcgpu.array.collective", "auto")), cluster_workers())


def wanted(kind: str, choice: str, workers: int) -> bool:
    """Whether ``hpcgpu.array.collective`` = ``choice`` takes the plane for an operation of
    ``kind`` on a distributed cluster of ``workers`` workers (0: no distributed client).

    >>> wanted("matmul", "auto", 1), wanted("matmul", "auto", 0), wanted("transpose", "always", 0)
    (True, False, True)
    """
    if choice in ("always", "never"):
        return choice == "always"
    if choice != "auto":
        raise ValueError(f"hpcgpu.array.collective={choice!r}: use auto, always or never")
    least = AUTO_MIN_WORKERS[kind]
    return least is not None and workers >= least


def _say(kind: str, plane: bool) -> None:
    logger.info("%s: %s path", kind, "collective" if plane else "task")


def rechunk(x, chunks="auto", threshold=None, block_size_limit=None, balance=False, method=None):
    """:func:`dask.array.rechunk`, on the plane where :func:`use_collective` says so."""
    plane = use_collective(method) and not balance and x.npartitions > 1
    _say("rechunk", plane)
    if not plane:
        return da.rechunk(x, chunks, threshold=threshold, block_size_limit=block_size_limit,
                          balance=balance, method=method if method in _TASK_METHODS else None)
    if isinstance(chunks, dict):
        chunks = tuple(chunks.get(i, c) for i, c in enumerate(x.chunks))
    new = normalize_chunks(chunks, x.shape, limit=block_size_limit, dtype=x.dtype, previous_chunks=x.chunks)
    if new == x.chunks:
        return x
    return collective(Rechunk(x.chunks, new, x.dtype), [x], x._meta)


def transpose(x, axes=None, method=None):
    """:func:`dask.array.transpose`, with the blocks moved on the plane: block ``b`` of
    the result lies where block ``b`` of ``x`` does, so ``x + x.T`` adds side by side."""
    axes = tuple(axes) if axes is not None else tuple(range(x.ndim))[::-1]
    plane = use_collective(method, "transpose") and x.npartitions > 1
    _say("transpose", plane)
    if not plane:
        return da.transpose(x, axes)
    return collective(Transpose(x.chunks, axes, x.dtype), [x], x._meta.transpose(axes))


def matmul(a, b, method=None):
    """:func:`dask.array.matmul` of two 2-D arrays; on the plane each worker multiplies a
    panel of whole rows of ``a`` by all of ``b`` in one BLAS call."""
    plane = use_collective(method, "matmul") and a.ndim == b.ndim == 2 and a.npartitions * b.npartitions > 1
    _say("matmul", plane)
    if not plane:
        return da.matmul(a, b)
    if a.chunks[1] != b.chunks[0]:
        b = rechunk(b, (a.chunks[1], b.chunks[1]), method=method)
    dtype = np.result_type(a.dtype, b.dtype)
    a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
    return collective(Matmul(a.chunks, b.chunks, dtype), [a, b], a._meta)


def sort(x, axis=-1, method=None):
    """:func:`numpy.sort` along ``axis``, the result chunked as ``x``.

    A 1-D array is sorted on the plane by a sample sort (:mod:`hpcgpu.array.plane.sorting`):
    every worker sorts what it holds and keeps its share. Along an axis of an n-D array the
    axis is made whole by :func:`rechunk` (on the plane, where chosen), each block sorted,
    and the result rechunked back. On the task path (``method="tasks"``) a 1-D array is
    sorted in one block.

    >>> import numpy as np, dask.array as da
    >>> x = da.from_array(np.array([5, 1, 4, 2, 3, 0]), chunks=2)
    >>> sort(x, method="collective").compute().tolist()
    [0, 1, 2, 3, 4, 5]
    >>> argsort(x, method="collective").compute().tolist()
    [5, 1, 3, 4, 2, 0]
    """
    return _sort(x, axis, method, arg=False)


def argsort(x, axis=-1, method=None):
    """:func:`numpy.argsort` along ``axis`` with ``kind="stable"`` (equal values keep their
    order), chunked as ``x``; on the plane as :func:`sort` is."""
    return _sort(x, axis, method, arg=True)


def _sort(x, axis, method, arg: bool):
    from hpcgpu.array.plane.sorting import Sort, stable_argsort

    axis = range(x.ndim)[axis]
    plane = use_collective(method, "sort") and x.numblocks[axis] > 1
    _say("argsort" if arg else "sort", plane)
    dtype = np.dtype(np.int64) if arg else x.dtype
    if plane and x.ndim == 1:
        meta = x._meta.astype(dtype) if arg else x._meta
        return collective(Sort(x.chunks, x.dtype, arg), [x], meta)

    def one_block(block):
        xp = np
        if type(block).__module__.startswith("cupy"):
            import cupy as xp
        return stable_argsort(xp, block, axis) if arg else xp.sort(block, axis=axis)

    if x.numblocks[axis] == 1:
        return x.map_blocks(one_block, dtype=dtype)
    whole = {i: (-1 if i == axis else "auto") for i in range(x.ndim)}
    y = rechunk(x, whole, method=method if plane else "tasks")
    return rechunk(y.map_blocks(one_block, dtype=dtype), x.chunks, method=method if plane else "tasks")
