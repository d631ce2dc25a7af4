"""Dask DataFrames with cuDF partitions on a GPU and pandas partitions without one.

Readers run under Dask's ``dataframe.backend`` config (``cudf`` needs dask-cudf, which
registers that backend); moves are ``DataFrame.to_backend``. The results are plain Dask
DataFrames, so groupby-aggregate, merge, shuffle, ``map_partitions`` and rolling windows
inside partitions work as dask-cudf does them.

A superset of :mod:`dask.dataframe`: ``import hpcgpu.dataframe as dd`` runs code written
for ``dask.dataframe``; the names not defined here are Dask's own objects.

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

from hpcgpu.system.backends import library_of, moved_to, resolve_backend
from hpcgpu.system.reexport import fallback

__all__ = ["from_pandas", "read_csv", "read_parquet", "timeseries", "gpu_partition_freq", "asgpu", "ascpu", "backend_of"]


def backend_of(df) -> str:
    """``"cudf"`` or ``"pandas"``: the library of ``df``'s partitions."""
    return library_of("dataframe", df)


def asgpu(df):
    """``df`` with cuDF partitions (``to_backend("cudf")``); a ValueError without cuDF."""
    return moved_to("dataframe", df, resolve_backend("dataframe", "gpu"))


def ascpu(df):
    """``df`` with pandas partitions (``to_backend("pandas")``).

    Examples
    --------
    >>> import pandas as pd
    >>> backend_of(ascpu(from_pandas(pd.DataFrame({"a": [1, 2]}), npartitions=1, backend="cpu")))
    'pandas'
    """
    return moved_to("dataframe", df, "pandas")


def from_pandas(data, npartitions: int | None = None, *args: Any, backend: str | None = None, **kwargs: Any):
    """A Dask DataFrame from an in-memory pandas (or cuDF) frame, on ``backend``.

    Examples
    --------
    >>> import pandas as pd
    >>> df = from_pandas(pd.DataFrame({"k": [1, 1, 2], "v": [1., 2., 3.]}), npartitions=2,
    ...                  backend="cpu")
    >>> df.groupby("k").v.sum().compute().to_dict()
    {1: 3.0, 2: 3.0}
    """
    return moved_to("dataframe", dd.from_pandas(data, npartitions, *args, **kwargs),
                    resolve_backend("dataframe", backend))


def _read(reader: str, backend: str | None, /, *args: Any, **kwargs: Any):
    with dask.config.set({"dataframe.backend": resolve_backend("dataframe", backend)}):
        return getattr(dd, reader)(*args, **kwargs)


def read_csv(path, *args: Any, backend: str | None = None, **kwargs: Any):
    """``dask.dataframe.read_csv`` on ``backend`` (cuDF's reader on a GPU)."""
    return _read("read_csv", backend, path, *args, **kwargs)


def read_parquet(path=None, *args: Any, backend: str | None = None, **kwargs: Any):
    """``dask.dataframe.read_parquet`` on ``backend`` (cuDF's reader on a GPU)."""
    return _read("read_parquet", backend, path, *args, **kwargs)


#: rows per partition that ``timeseries`` aims at on a GPU when no ``partition_freq`` is given
GPU_PARTITION_ROWS = 2**22


def timeseries(start="2000-01-01", end="2000-01-31", freq="1s", partition_freq=None,
               dtypes=None, seed=None, *, backend: str | None = None, **kwargs: Any):
    """:func:`dask.datasets.timeseries` (columns id, name, x, y), on ``backend``.

    The partitions are made by pandas and moved per partition, so a seed gives the same
    rows on either backend. ``partition_freq`` defaults to dask's one day on pandas; on
    cuDF, to :func:`gpu_partition_freq`: a one-day partition (86,400 rows) is microseconds
    of GPU work under a millisecond of per-task and kernel-launch cost.
    """
    import dask.datasets

    backend = resolve_backend("dataframe", backend)
    if partition_freq is None:
        partition_freq = gpu_partition_freq(start, end, freq) if backend == "cudf" else "1D"
    df = dask.datasets.timeseries(start=start, end=end, freq=freq, partition_freq=partition_freq,
                                  dtypes=dtypes, seed=seed, **kwargs)
    return moved_to("dataframe", df, backend)


def gpu_partition_freq(start, end, freq: str) -> str:
    """Equal partitions of about :data:`GPU_PARTITION_ROWS` rows that tile ``[start, end)``.

    Dask's ``timeseries`` drops the rows after the last whole ``partition_freq`` (and
    makes no partition when it exceeds the range), so the length divides the range.

    Examples
    --------
    >>> gpu_partition_freq("2000-01-01", "2000-12-31", "1s")  # 365 days: 8 x 3,942,000 rows
    '1095h'
    >>> gpu_partition_freq("2000-01-01", "2000-01-31", "1s")  # 30 days: one partition
    '720h'
    """
    import pandas as pd
    from pandas.tseries.frequencies import to_offset

    step = pd.Timedelta(freq)
    rows = int((pd.Timestamp(end) - pd.Timestamp(start)) / step)
    parts = max(1, round(rows / GPU_PARTITION_ROWS))
    while rows % parts:  # the nearest smaller count that divides the rows evenly
        parts -= 1
    return to_offset(step * (rows // parts)).freqstr


# every other name of dask.dataframe (merge, concat, to_datetime, DataFrame, ...): Dask's own
__getattr__, __dir__, __all__ = fallback(__name__, globals(), "dask.dataframe")
