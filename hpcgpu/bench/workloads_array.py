"""Array and task-graph workloads: array-sum, transpose-sum, svd, many-fits, noop, bootstrap.

Sizes follow docs/benchmarks.md: ``full`` is the published reference size, smaller
presets keep the chunk shape where they can so that per-task costs stay comparable.
Chunks are CuPy arrays on GPU workers and NumPy arrays otherwise, chosen through Dask's
own backend dispatch (``array.backend``).
"""

from __future__ import annotations

import math
from itertools import combinations, cycle, islice

from hpcgpu.bench.workload import RunContext, Size, Workload

__all__ = ["random_array", "ARRAY_SUM", "TRANSPOSE_SUM", "SVD", "MANY_FITS", "NOOP", "BOOTSTRAP"]

# preset -> (n, chunk) of a square n x n array
_SQUARE = {"tiny": (2000, 500), "small": (8000, 1000), "medium": (100000, 10000),
           "large": (200000, 10000), "full": (500000, 10000)}
_TRANSPOSE = {"tiny": (2000, 500), "small": (6000, 1000), "medium": (20000, 5000),
              "large": (40000, 5000), "full": (40000, 5000)}
# preset -> (rows, columns, row chunk) of a tall-skinny array
_SVD = {"tiny": (4000, 100, 500), "small": (40000, 200, 2000), "medium": (100000, 1000, 1000),
        "large": (300000, 1000, 1000), "full": (300000, 1000, 1000)}
# preset -> (rows, columns) of the many-fits frame; fits = one per column pair
_FITS = {"tiny": (2000, 10), "small": (100000, 20), "medium": (1000000, 50),
         "large": (1000000, 50), "full": (1000000, 50)}


def _check(preset: str, table: dict) -> tuple:
    if preset not in table:
        raise ValueError(f"size preset {preset!r} is unknown: choose from {', '.join(table)}")
    return table[preset]


def random_array(ctx: RunContext, shape: tuple[int, int], chunks: tuple[int, int], normal: bool = True):
    """A random Dask array with chunks of the context's backend (CuPy or NumPy).

    With ``ctx.library == "hpcgpu"`` it comes from :mod:`hpcgpu.array` (a Philox
    generator per block), otherwise from ``dask.array.random.RandomState`` as plain Dask
    users make it (the blog post's code; CuPy's ``Generator`` has no ``normal``, so
    ``default_rng`` cannot make this array on CuPy).

    Examples
    --------
    >>> x = random_array(RunContext(client=None, gpus=1), (4, 6), (2, 3))
    >>> x.shape, x.chunks, type(x._meta).__module__
    ((4, 6), ((2, 2), (3, 3)), 'numpy')
    """
    import dask
    import dask.array as da

    if ctx.library == "hpcgpu":
        from hpcgpu.array import random as hrandom

        make = hrandom.normal if normal else hrandom.uniform
        return make(10 if normal else 0, 1, size=shape, chunks=chunks, seed=42, backend=ctx.array_backend)
    with dask.config.set({"array.backend": ctx.array_backend}):
        rng = da.random.RandomState(42)
        if normal:
            return rng.normal(10, 1, size=shape, chunks=chunks)
        return rng.random_sample(size=shape, chunks=chunks)


def _square_size(preset: str, gpus: int, scaling: str) -> Size:
    n, chunk = _check(preset, _SQUARE)
    rows = n * gpus if scaling == "weak" else n
    return Size(f"{rows}x{n} chunk {chunk}", rows * n * 8.0, "B", {"shape": (rows, n), "chunk": chunk})


def _array_sum(ctx: RunContext, size: Size, state) -> float:
    chunk = size.params["chunk"]
    x = random_array(ctx, size.params["shape"], (chunk, chunk))
    return float(ctx.compute((x + 1)[::2, ::2].sum())[0])


ARRAY_SUM = Workload(
    "array-sum", "(x + 1)[::2, ::2].sum() of normal(10, 1) (Dask blog, 2019); generation timed",
    "array", _square_size, _array_sum)


def _noop_size(preset: str, gpus: int, scaling: str) -> Size:
    base = _square_size(preset, gpus, scaling)
    rows, cols = base.params["shape"]
    blocks = (math.ceil(rows / base.params["chunk"]), math.ceil(cols / base.params["chunk"]))
    return Size(f"{blocks[0]}x{blocks[1]} blocks", float(blocks[0] * blocks[1]), "blocks",
                {"blocks": blocks})


def _noop(ctx: RunContext, size: Size, state) -> float:
    import dask.array as da

    x = da.ones(size.params["blocks"], chunks=1)  # array-sum's task graph, 1-element chunks
    return float(ctx.compute((x + 1).sum())[0])


NOOP = Workload(
    "noop", "array-sum's graph with one-element chunks: Dask's own per-task cost", "graph",
    _noop_size, _noop)


def _transpose_size(preset: str, gpus: int, scaling: str) -> Size:
    n, chunk = _check(preset, _TRANSPOSE)
    if scaling == "weak":  # n^2 grows with the GPUs, n stays a multiple of the chunk
        n = math.ceil(n * math.sqrt(gpus) / chunk) * chunk
    return Size(f"{n}x{n} chunk {chunk}", n * n * 8.0, "B", {"n": n, "chunk": chunk})


def _transpose_prepare(ctx: RunContext, size: Size):
    n, chunk = size.params["n"], size.params["chunk"]
    return ctx.persist(random_array(ctx, (n, n), (chunk, chunk), normal=False))[0]


def _transpose_sum(ctx: RunContext, size: Size, x) -> float:
    return float(ctx.compute((x + x.T).sum())[0])


TRANSPOSE_SUM = Workload(
    "transpose-sum", "(x + x.T).sum() on a persisted array (dask-cuda local_cupy): communication",
    "array", _transpose_size, _transpose_sum, _transpose_prepare)


def _svd_size(preset: str, gpus: int, scaling: str) -> Size:
    rows, cols, chunk = _check(preset, _SVD)
    rows = rows * gpus if scaling == "weak" else rows
    return Size(f"{rows}x{cols} chunk {chunk}x{cols}", rows * cols * 8.0, "B",
                {"shape": (rows, cols), "chunk": chunk})


def _svd_prepare(ctx: RunContext, size: Size):
    rows, cols = size.params["shape"]
    return ctx.persist(random_array(ctx, (rows, cols), (size.params["chunk"], cols), normal=False))[0]


def _svd(ctx: RunContext, size: Size, x) -> None:
    import dask.array as da

    from hpcgpu.array import linalg

    # hpcgpu's svd merges row blocks to fit the cluster; plain Dask users call Dask's
    u, s, v = (linalg.svd if ctx.library == "hpcgpu" else da.linalg.svd)(x)
    ctx.persist(u, s, v)  # results stay distributed, as in the RAPIDS notebook


SVD = Workload(
    "svd", "svd of a persisted tall-skinny array (RAPIDS multi-GPU notebook): hpcgpu.array.linalg.svd, or "
    "da.linalg.svd for plain Dask",
    "array", _svd_size, _svd, _svd_prepare)


def _fits_size(preset: str, gpus: int, scaling: str) -> Size:
    rows, cols = _check(preset, _FITS)
    fits = cols * (cols - 1) // 2 * (gpus if scaling == "weak" else 1)
    return Size(f"{rows}x{cols}, {fits} fits", float(fits), "fits",
                {"rows": rows, "cols": cols, "fits": fits})


def _to_device(array, backend: str):
    if backend == "cupy":
        import cupy

        return cupy.asarray(array)
    return array


def _fit(data, i: int, j: int) -> tuple[float, float]:
    """Least-squares line through column j against column i."""
    import sys

    import numpy

    xp = sys.modules["cupy"] if type(data).__module__.startswith("cupy") else numpy
    x, y = data[:, i], data[:, j]
    design = xp.stack([x, xp.ones_like(x)], axis=1)
    coef = xp.linalg.lstsq(design, y, rcond=None)[0]
    return float(coef[0]), float(coef[1])


def _fits_prepare(ctx: RunContext, size: Size):
    import numpy as np

    data = np.random.default_rng(42).standard_normal((size.params["rows"], size.params["cols"]))
    workers = ctx.worker_addresses()
    host = ctx.client.scatter(data, workers=workers, broadcast=True)
    copies = [ctx.submit(_to_device, host, ctx.array_backend, worker=w) for w in workers]
    ctx._wait(copies)
    return workers, copies


def _many_fits(ctx: RunContext, size: Size, state) -> None:
    workers, copies = state
    pairs = islice(cycle(combinations(range(size.params["cols"]), 2)), size.params["fits"])
    futures = [ctx.submit(_fit, copies[k % len(workers)], i, j, worker=workers[k % len(workers)])
               for k, (i, j) in enumerate(pairs)]
    ctx.client.gather(ctx._wait(futures))


MANY_FITS = Workload(
    "many-fits", "one small regression per column pair on a frame broadcast to every worker",
    "graph", _fits_size, _many_fits, _fits_prepare)


def _bootstrap_size(preset: str, gpus: int, scaling: str) -> Size:
    return Size(f"{gpus} workers", float(gpus), "workers", {})


BOOTSTRAP = Workload(
    "bootstrap", "time from asking for N GPU workers to N workers connected", "cluster",
    _bootstrap_size, None)

#: The workloads this module defines (the registry lists them by name).
WORKLOADS = (ARRAY_SUM, NOOP, TRANSPOSE_SUM, SVD, MANY_FITS, BOOTSTRAP)
