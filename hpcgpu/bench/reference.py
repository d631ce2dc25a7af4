"""The reference workloads of Dask on GPUs, by name, for the demo and the benchmarks.

Each builder takes a size and a backend and returns a :class:`Workload`: what to set up
(untimed: data persisted on the workers), what to compute (timed), and how many bytes
the computation goes through. The operations are those of the public record and stay
as they are; only the sizes are parameters.

=============  ============================================================================
array-sum      Dask blog "GPU Dask Arrays, first steps": ``(x + 1)[::2, ::2].sum()`` of
               ``normal(10, 1, (n, n), chunks)``
svd            RAPIDS multi-GPU notebook: ``da.linalg.svd`` of ``random((rows, cols))``
groupby        the same notebook: ``timeseries()`` then
               ``groupby(["id", "name"]).agg({"x": ["sum", "mean"]})``
rolling        the same notebook: ``map_partitions`` sorting by ``id`` and a ``rolling(3)``
               mean of ``x``, ``y``
many-fits      the same notebook: a frame broadcast to every worker, one small
               regression per pair of columns as delayed tasks
transpose-sum  dask-cuda's ``local_cupy`` benchmark: ``(x + x.T).sum()``
=============  ============================================================================
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any, Callable

import dask
import dask.array as da

import hpcgpu.array as ha
import hpcgpu.dataframe as hd
from hpcgpu.system.backends import resolve_backend

__all__ = ["Workload", "Timing", "WORKLOADS", "array_sum", "svd", "groupby", "rolling",
           "many_fits", "transpose_sum", "run"]


@dataclass(frozen=True)
class Workload:
    """One reference computation at one size on one backend.

    Attributes
    ----------
    name, size, backend : str
        Workload name, human-readable size, chunk library (cupy/numpy/cudf/pandas).
    nbytes : int
        Bytes of the data the computation goes through (for GB/s).
    setup : callable
        ``setup(client) -> inputs``: untimed preparation (``client`` may be None).
    compute : callable
        ``compute(inputs, client) -> result``: the timed part; returns a small result.
    """

    name: str
    size: str
    nbytes: int
    backend: str
    setup: Callable[[Any], Any]
    compute: Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Timing:
    """One timed run: the workload, seconds of ``compute``, and its result."""

    workload: Workload
    seconds: float
    result: Any

    @property
    def gbps(self) -> float:
        """Throughput in GB/s (1e9 bytes)."""
        return self.workload.nbytes / self.seconds / 1e9


def _persist(collection, client):
    if client is None:
        (out,) = dask.persist(collection)
        return out
    from distributed import wait

    out = client.persist(collection)
    wait(out)
    return out


def _get(collection, client):
    return collection.compute() if client is None else client.compute(collection).result()


def array_sum(n: int = 500_000, chunk: int = 10_000, *, seed: int = 0, backend=None) -> Workload:
    """``(x + 1)[::2, ::2].sum()`` of ``normal(10, 1, (n, n))`` in ``chunk``-square blocks.

    Examples
    --------
    >>> w = array_sum(400, 100, backend="cpu")
    >>> w.nbytes, round(float(run(w).result) / (200 * 200))
    (1280000, 11)
    """
    backend = resolve_backend("array", backend)

    def compute(_inputs, client):
        x = ha.random.normal(10, 1, size=(n, n), chunks=(chunk, chunk), seed=seed, backend=backend)
        return _get((x + 1)[::2, ::2].sum(), client)

    return Workload("array-sum", f"{n}x{n} f8 ({chunk}^2)", n * n * 8, backend,
                    lambda client: None, compute)


def svd(rows: int = 300_000, cols: int = 1_000, chunk: int = 1_000, *, seed: int = 0,
        backend=None, linalg: str = "hpcgpu") -> Workload:
    """``u, s, v = svd(random((rows, cols), chunks=(chunk, chunk)))``, persisted: with
    ``linalg="hpcgpu"`` :func:`hpcgpu.array.linalg.svd` (row blocks sized for the
    cluster), with ``"dask"`` :func:`dask.array.linalg.svd` on the blocks as they are.

    Examples
    --------
    >>> w = svd(2000, 20, 20, backend="cpu")
    >>> len(run(w).result)
    20
    """
    backend = resolve_backend("array", backend)
    decompose = {"hpcgpu": ha.linalg.svd, "dask": da.linalg.svd}[linalg]

    def setup(client):
        x = ha.random.random((rows, cols), chunks=(chunk, chunk), seed=seed, backend=backend)
        return _persist(x, client)

    def compute(x, client):
        u, s, v = _persist(decompose(x), client)
        return _get(ha.ascpu(s), client)

    return Workload("svd", f"{rows}x{cols} f8 ({chunk}^2)", rows * cols * 8, backend, setup, compute)


def _frame(days: int, freq: str, seed: int, backend: str, partition_freq: str | None = None):
    import pandas as pd

    stop = (pd.Timestamp("2000-01-01") + pd.Timedelta(days=days)).isoformat()
    return hd.timeseries(start="2000-01-01", end=stop, freq=freq, seed=seed, backend=backend,
                         partition_freq=partition_freq)


def _rows(days: int, freq: str) -> int:
    return int(days * 86400 / dask.utils.parse_timedelta(freq))


def groupby(days: int = 365, freq: str = "1s", *, seed: int = 0, backend=None,
            partition_freq: str | None = None) -> Workload:
    """``groupby(["id", "name"]).agg({"x": ["sum", "mean"]})`` over ``days`` of ``timeseries``.

    Rows are ``days * 86400 / freq`` (one year at 1 s: 31.5 M); bytes count the four
    columns at 8 bytes each (``name`` as its category code would be). ``partition_freq``
    is :func:`hpcgpu.dataframe.timeseries`'s (GPU-sized partitions on cuDF by default).

    Examples
    --------
    >>> w = groupby(2, "10s", backend="cpu")
    >>> list(run(w).result.columns)
    [('x', 'sum'), ('x', 'mean')]
    """
    backend = resolve_backend("dataframe", backend)

    def compute(df, client):
        return _get(df.groupby(["id", "name"]).agg({"x": ["sum", "mean"]}), client)

    return Workload("groupby", f"{_rows(days, freq) / 1e6:.1f} M rows", _rows(days, freq) * 32,
                    backend, lambda client: _persist(_frame(days, freq, seed, backend, partition_freq), client),
                    compute)


def _sorted_rolling(part):
    return part.sort_values("id")[["x", "y"]].rolling(3).mean()


def rolling(days: int = 30, freq: str = "1s", *, seed: int = 0, backend=None) -> Workload:
    """``map_partitions``: sort each partition by ``id``, then a ``rolling(3)`` mean of x, y.

    Examples
    --------
    >>> w = rolling(1, "60s", backend="cpu")
    >>> isinstance(run(w).result, float)
    True
    """
    backend = resolve_backend("dataframe", backend)

    def compute(df, client):
        return float(_get(df.map_partitions(_sorted_rolling).x.sum(), client))

    return Workload("rolling", f"{_rows(days, freq) / 1e6:.1f} M rows", _rows(days, freq) * 32,
                    backend, lambda client: _persist(_frame(days, freq, seed, backend), client),
                    compute)


def _fit(frame, i: int, j: int):
    xp = __import__(type(frame).__module__.split(".")[0])
    a = xp.stack([frame[:, i], xp.ones_like(frame[:, i])], axis=1)
    coef = xp.linalg.lstsq(a, frame[:, j], rcond=None)[0]
    return float(coef[0])


def many_fits(rows: int = 1_000_000, cols: int = 50, *, seed: int = 0, backend=None) -> Workload:
    """A ``rows x cols`` frame broadcast to every worker; one least-squares fit per column pair.

    ``cols * (cols - 1) / 2`` fits (1225 for 50 columns), each a delayed task.

    Examples
    --------
    >>> w = many_fits(1000, 5, backend="cpu")
    >>> len(run(w).result)
    10
    """
    backend = resolve_backend("array", backend)

    def setup(client):
        frame = ha.random.random((rows, cols), chunks=(rows, cols), seed=seed, backend=backend)
        frame = frame.compute()
        return client.scatter(frame, broadcast=True) if client is not None else frame

    def compute(frame, client):
        fits = [dask.delayed(_fit)(frame, i, j) for i, j in itertools.combinations(range(cols), 2)]
        return client.gather(client.compute(fits)) if client is not None else dask.compute(*fits)

    return Workload("many-fits", f"{cols * (cols - 1) // 2} fits of {rows}x2", rows * cols * 8 * (cols - 1),
                    backend, setup, compute)


def transpose_sum(n: int = 40_000, chunk: int = 5_000, *, seed: int = 0, backend=None) -> Workload:
    """``(x + x.T).sum()`` of a persisted ``random((n, n))``: moves half the data between blocks.

    Examples
    --------
    >>> w = transpose_sum(400, 100, backend="cpu")
    >>> round(float(run(w).result) / (400 * 400))
    1
    """
    backend = resolve_backend("array", backend)

    def setup(client):
        return _persist(ha.random.random((n, n), chunks=(chunk, chunk), seed=seed, backend=backend), client)

    return Workload("transpose-sum", f"{n}x{n} f8 ({chunk}^2)", n * n * 8, backend, setup,
                    lambda x, client: _get((x + x.T).sum(), client))


#: name -> builder
WORKLOADS: dict[str, Callable[..., Workload]] = {
    "array-sum": array_sum, "svd": svd, "groupby": groupby, "rolling": rolling,
    "many-fits": many_fits, "transpose-sum": transpose_sum,
}


def run(workload: Workload, client=None, repeat: int = 1) -> Timing:
    """Set up ``workload`` once, then time ``compute`` ``repeat`` times; keep the fastest."""
    inputs = workload.setup(client)
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = workload.compute(inputs, client)
        best = min(best, time.perf_counter() - start)
    return Timing(workload, best, result)
