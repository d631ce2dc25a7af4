"""QR and SVD of tall-and-skinny arrays in blocks sized for the cluster, not for one core.

Dask's ``linalg.qr``/``linalg.svd`` run TSQR over the array's row blocks as they are: one
QR per block, then one over the stacked R factors. With the 1000 x 1000 blocks of the
RAPIDS notebook's 300000 x 1000 array that is 300 small QRs, each taking a GPU far less
time than its launch latencies and Dask's per-task cost: 4.8 s on one H200, against 0.4 s
for the same decomposition on two row blocks. These functions first merge the row blocks
into as few as keep every worker thread busy (:func:`row_blocks`: one block per thread,
at least two, none larger than ``hpcgpu.array.linalg.max-block``, default 4 GiB), then run
Dask's own TSQR on them: the same algorithm and results, on blocks a GPU can use. A
short-and-fat array goes through its transpose (``svd``) or into column blocks at least
as wide as it is tall (``qr``, as Dask's QR of such arrays needs); any other array goes to
Dask unchanged. Every other name of :mod:`dask.array.linalg` (``cholesky``, ``lstsq``,
``solve``, ``tsqr``, ...) is Dask's own object here.

On the collective plane (``hpcgpu.array.collective: auto`` on a distributed cluster, the
default, or ``method="collective"``; ``method="tasks"`` keeps Dask's TSQR) a tall-and-skinny QR or SVD of a real array is one QR per worker over all the rows it
holds and one exchange of the small factors each way
(:mod:`hpcgpu.array.plane.tsqr`), not a tree of tasks.
"""

from __future__ import annotations

import dask
import dask.array as da
from dask.utils import parse_bytes

from hpcgpu.system.reexport import fallback

__all__ = ["svd", "qr", "row_blocks", "tall_and_skinny"]
__getattr__, __dir__, __all__ = fallback(__name__, globals(), "dask.array.linalg")


def row_blocks(shape: tuple, itemsize: int, threads: int, max_block: int) -> int:
    """How many row blocks a tall-and-skinny ``shape`` is split into: one per worker
    thread, at least two (TSQR then runs; one block would be a single dense SVD), no
    block over ``max_block`` bytes, never more blocks than rows.

    Examples
    --------
    >>> row_blocks((300_000, 1000), 8, threads=1, max_block=4 * 2**30)
    2
    >>> row_blocks((300_000, 1000), 8, threads=4, max_block=4 * 2**30)
    4
    >>> row_blocks((300_000, 1000), 8, threads=1, max_block=2**28)
    9
    """
    rows, cols = shape
    by_size = -(-rows * cols * itemsize // max(max_block, 1))
    return max(1, min(rows, max(2, threads, by_size)))


def tall_and_skinny(a: da.Array) -> da.Array:
    """``a`` (2-D, rows >= columns) with its columns in one block and its rows in
    :func:`row_blocks` blocks of nearly equal size.

    Examples
    --------
    >>> import numpy as np
    >>> x = da.from_array(np.ones((1000, 10)), chunks=(10, 5))
    >>> with dask.config.set({"hpcgpu.array.linalg.max-block": "16kB"}):
    ...     tall_and_skinny(x).chunks[1], len(tall_and_skinny(x).chunks[0])
    ((10,), 5)
    """
    from hpcgpu.array.optimization import cluster_threads

    max_block = parse_bytes(dask.config.get("hpcgpu.array.linalg.max-block", "4GiB"))
    blocks = row_blocks(a.shape, a.dtype.itemsize, cluster_threads(), max_block)
    return a.rechunk((_even(a.shape[0], blocks), (a.shape[1],)))


def _even(total: int, blocks: int) -> tuple:
    return tuple(total // blocks + (1 if i < total % blocks else 0) for i in range(blocks))


def _dasks(a: da.Array) -> bool:
    """Whether ``a`` goes to Dask unchanged: not 2-D, or chunks of unknown size (which
    cannot be merged; Dask's TSQR handles them)."""
    return a.ndim != 2 or any(c != c for dim in a.chunks for c in dim)


def _on_plane(a: da.Array, method: str | None):
    """``a`` with its columns in one block, for the plane's TSQR; None where the task path
    runs (not chosen, not a real floating-point array, fewer rows than columns)."""
    from hpcgpu.array.plane import rechunk, use_collective

    if a.dtype.kind != "f" or a.shape[0] < a.shape[1] or not use_collective(method, "tsqr"):
        return None
    return a if a.numblocks[1] == 1 else rechunk(a, (a.chunks[0], (a.shape[1],)), method=method)


def _tsqr(a: da.Array, svd: bool, coerce_signs: bool = True):
    from dask.array.utils import meta_from_array

    from hpcgpu.array.plane.graph import collective
    from hpcgpu.array.plane.tsqr import TallSkinny

    metas = [a._meta, meta_from_array(a._meta, ndim=1), a._meta] if svd else [a._meta, a._meta]
    return collective(TallSkinny(a.chunks, a.dtype, svd, coerce_signs), [a], metas)


def qr(a: da.Array, method: str | None = None):
    """``q, r = qr(a)``: :func:`dask.array.linalg.qr` of :func:`tall_and_skinny` ``a``;
    a short-and-fat ``a`` in one row block and column blocks at least as wide as it is
    tall (what Dask's QR of such arrays needs). ``method="collective"``: on the plane.

    Examples
    --------
    >>> import numpy as np
    >>> x = da.from_array(np.arange(60.0).reshape(20, 3) ** 1.5, chunks=(2, 3))
    >>> q, r = qr(x)
    >>> bool(np.allclose((q @ r).compute(), x.compute()))
    True
    """
    if _dasks(a):
        return da.linalg.qr(a)
    plane = _on_plane(a, method)
    if plane is not None:
        return _tsqr(plane, svd=False)
    rows, cols = a.shape
    if rows >= cols:
        return da.linalg.qr(tall_and_skinny(a))
    blocks = max(1, min(len(tall_and_skinny(a.T).chunks[0]), cols // rows))
    return da.linalg.qr(a.rechunk(((rows,), _even(cols, blocks))))


def svd(a: da.Array, coerce_signs: bool = True, full_matrices: bool = False, method: str | None = None):
    """``u, s, v = svd(a)``: :func:`dask.array.linalg.svd` of :func:`tall_and_skinny`
    ``a`` (of its transpose for a short-and-fat ``a``). ``method="collective"``: on the
    plane.

    Examples
    --------
    >>> import numpy as np
    >>> x = da.from_array(np.random.default_rng(0).random((200, 8)), chunks=(10, 8))
    >>> u, s, v = svd(x)
    >>> bool(np.allclose(s.compute(), np.linalg.svd(x.compute(), compute_uv=False)))
    True
    """
    if _dasks(a) or full_matrices:  # Dask's own answer (full_matrices: its NotImplementedError)
        return da.linalg.svd(a, coerce_signs=coerce_signs, full_matrices=full_matrices)
    if a.shape[0] < a.shape[1]:
        v, s, u = svd(a.T, coerce_signs=coerce_signs, method=method)
        return u.T, s, v.T
    plane = _on_plane(a, method)
    if plane is not None:
        return _tsqr(plane, svd=True, coerce_signs=coerce_signs)
    return da.linalg.svd(tall_and_skinny(a), coerce_signs=coerce_signs)
