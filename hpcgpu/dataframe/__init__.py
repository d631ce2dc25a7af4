"""Dask DataFrames with cuDF partitions on a GPU and pandas partitions without one.

Readers run under Dask's ``dataframe.backend`` config (``cudf`` needs dask-cudf, which
registers that backend); moves are ``DataFrame.to_backend``. The results are plain Dask
DataFrames, so groupby-aggregate, merge, shuffle, ``map_partitions`` and rolling windows
inside partitions work as dask-cudf does them.

Examples
--------
>>> import hpcgpu.dataframe as hd
>>> df = hd.timeseries(end="2000-01-03", seed=0, backend="cpu")
>>> out = df.groupby(["id", "name"]).agg({"x": ["sum", "mean"]}).compute()
>>> list(out.columns), backend_of(df)
([('x', 'sum'), ('x', 'mean')], 'pandas')
"""

from __future__ import annotations

from typing import Any

import dask
import dask.dataframe as dd

from hpcgpu.array._backend import resolve_backend

__all__ = ["from_pandas", "read_csv", "read_parquet", "timeseries", "gpu_partition_freq", "asgpu", "ascpu", "backend_of"]


def backend_of(df) -> str:
    """``"cudf"`` or ``"pandas"``: the library of ``df``'s partitions."""
    return "cudf" if type(df._meta).__module__.startswith("cudf") else "pandas"


def _to(df, backend: str):
    return df if backend_of(df) == backend else df.to_backend(backend)


def asgpu(df):
    """``df`` with cuDF partitions (``to_backend("cudf")``); a ValueError without cuDF."""
    return _to(df, resolve_backend("dataframe", "gpu"))


def ascpu(df):
    """``df`` with pandas partitions (``to_backend("pandas")``).

    Examples
    --------
    >>> import pandas as pd
    >>> backend_of(ascpu(from_pandas(pd.DataFrame({"a": [1, 2]}), npartitions=1, backend="cpu")))
    'pandas'
    """
    return _to(df, "pandas")


def from_pandas(data, npartitions: int | None = None, *, backend: str | None = None, **kwargs: Any):
    """A Dask DataFrame from an in-memory pandas (or cuDF) frame, on ``backend``.

    Examples
    --------
    >>> import pandas as pd
    >>> df = from_pandas(pd.DataFrame({"k": [1, 1, 2], "v": [1., 2., 3.]}), npartitions=2,
    ...                  backend="cpu")
    >>> df.groupby("k").v.sum().compute().to_dict()
    {1: 3.0, 2: 3.0}
    """
    return _to(dd.from_pandas(data, npartitions=npartitions, **kwargs),
               resolve_backend("dataframe", backend))


def _read(reader: str, backend: str | None, *args: Any, **kwargs: Any):
    with dask.config.set({"dataframe.backend": resolve_backend("dataframe", backend)}):
        return getattr(dd, reader)(*args, **kwargs)


def read_csv(path, *, backend: str | None = None, **kwargs: Any):
    """``dask.dataframe.read_csv`` on ``backend`` (cuDF's reader on a GPU)."""
    return _read("read_csv", backend, path, **kwargs)


def read_parquet(path, *, backend: str | None = None, **kwargs: Any):
    """``dask.dataframe.read_parquet`` on ``backend`` (cuDF's reader on a GPU)."""
    return _read("read_parquet", backend, path, **kwargs)


#: rows per partition that ``timeseries`` aims at on a GPU when no ``partition_freq`` is given
GPU_PARTITION_ROWS = 2**22


def timeseries(start="2000-01-01", end="2000-01-31", freq="1s", partition_freq=None,
               dtypes=None, seed=None, *, backend: str | None = None, **kwargs: Any):
    """:func:`dask.datasets.timeseries` (columns id, name, x, y), on ``backend``.

    The partitions are made by pandas and moved per partition, so a seed gives the same
    rows on either backend. ``partition_freq`` defaults to dask's one day on pandas; on
    cuDF, to whole days of about :data:`GPU_PARTITION_ROWS` rows (49 days at ``freq="1s"``):
    a one-day partition (86,400 rows) is a few microseconds of GPU work under a millisecond
    of per-task and kernel-launch cost, so the GPU would mostly wait.

    Examples
    --------
    >>> gpu_partition_freq("1s"), gpu_partition_freq("1min")
    ('49D', '2913D')
    """
    import dask.datasets

    backend = resolve_backend("dataframe", backend)
    if partition_freq is None:
        partition_freq = gpu_partition_freq(freq) if backend == "cudf" else "1D"
    df = dask.datasets.timeseries(start=start, end=end, freq=freq, partition_freq=partition_freq,
                                  dtypes=dtypes, seed=seed, **kwargs)
    return _to(df, backend)


def gpu_partition_freq(freq: str) -> str:
    """Whole days holding about :data:`GPU_PARTITION_ROWS` rows at one row per ``freq``."""
    import math

    import pandas as pd

    days = GPU_PARTITION_ROWS * pd.Timedelta(freq) / pd.Timedelta(days=1)
    return f"{max(1, math.ceil(days))}D"
