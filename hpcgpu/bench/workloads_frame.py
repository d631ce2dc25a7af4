"""DataFrame workloads: groupby, rolling (RAPIDS notebook), merge and shuffle (cuDF).

Partitions are cuDF frames on GPU workers with cuDF installed and pandas frames
otherwise (``DataFrame.to_backend``). Inputs are built and persisted untimed; the timed
part is the operation itself, its result persisted (or, for the groupby, gathered).
"""

from __future__ import annotations

from hpcgpu.bench.workload import RunContext, Size, Workload
from hpcgpu.bench.workloads_array import _check, inputs

__all__ = ["timeseries", "keyed_frame", "GROUPBY", "ROLLING", "MERGE", "SHUFFLE"]

# preset -> (days, frequency) of dask.datasets.timeseries, one partition per day
_TIMESERIES = {"tiny": (4, "60s"), "small": (30, "10s"), "medium": (90, "1s"),
               "large": (365, "1s"), "full": (365, "1s")}
_SECONDS = {"60s": 60, "10s": 10, "1s": 1}
# preset -> (partitions, rows per partition) of a keyed frame
_KEYED = {"tiny": (4, 5000), "small": (8, 100000), "medium": (16, 2000000),
          "large": (32, 5000000), "full": (64, 5000000)}


def _backend(ctx: RunContext, frame):
    return frame if ctx.dataframe_backend == "pandas" else frame.to_backend(ctx.dataframe_backend)


def timeseries(ctx: RunContext, days: int, freq: str):
    """``dask.datasets.timeseries`` over ``days`` days, on the context's backend.

    With ``ctx.library == "hpcgpu"`` through :func:`hpcgpu.dataframe.timeseries`.

    Examples
    --------
    >>> df = timeseries(RunContext(client=None, gpus=1), 2, "60s")
    >>> df.npartitions, list(df.columns)
    (2, ['name', 'id', 'x', 'y'])
    """
    import dask
    import pandas as pd

    end = pd.Timestamp("2000-01-01") + pd.Timedelta(days=days)
    if ctx.library == "hpcgpu":
        from hpcgpu.dataframe import timeseries as htimeseries

        return htimeseries(start="2000-01-01", end=end, freq=freq, partition_freq="1D", seed=42,
                           backend=ctx.dataframe_backend)
    frame = dask.datasets.timeseries(start="2000-01-01", end=end, freq=freq, partition_freq="1D", seed=42)
    return _backend(ctx, frame)


def _timeseries_size(preset: str, gpus: int, scaling: str) -> Size:
    days, freq = _check(preset, _TIMESERIES)
    days = days * gpus if scaling == "weak" else days
    rows = days * 86400 // _SECONDS[freq]
    return Size(f"{days} days at {freq} ({rows} rows)", float(rows), "rows", {"days": days, "freq": freq})


def _days(ctx: RunContext, size: Size):
    return timeseries(ctx, size.params["days"], size.params["freq"])


def _timeseries_prepare(ctx: RunContext, size: Size):
    return ctx.persist(_days(ctx, size))[0]


def _groupby_prepare(ctx: RunContext, size: Size):
    return inputs(ctx, size, _days)


def _groupby(ctx: RunContext, size: Size, frame) -> int:
    frame = _days(ctx, size) if frame is None else frame
    result = frame.groupby(["id", "name"]).agg({"x": ["sum", "mean"]})
    return len(ctx.compute(result)[0])


GROUPBY = Workload(
    "groupby", 'groupby(["id", "name"]).agg({"x": ["sum", "mean"]}) on persisted timeseries',
    "dataframe", _timeseries_size, _groupby, _groupby_prepare)


def _sorted_rolling(part):
    return part.sort_values("id")[["x", "y"]].rolling(3).mean()


def _rolling(ctx: RunContext, size: Size, frame) -> None:
    ctx.persist(frame.map_partitions(_sorted_rolling))


ROLLING = Workload(
    "rolling", "map_partitions: sort by id, rolling(3) mean of x and y (RAPIDS notebook)",
    "dataframe", _timeseries_size, _rolling, _timeseries_prepare)


def _keyed_part(index: int, rows: int, key_range: int, unique: bool, seed: int):
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(seed * 100003 + index)
    if unique:  # the right side of the merge: each key once
        keys = np.arange(index * rows, (index + 1) * rows, dtype="int64")
    else:
        keys = rng.integers(0, key_range, rows, dtype="int64")
    return pd.DataFrame({"key": keys, "payload": rng.random(rows)})


def keyed_frame(ctx: RunContext, parts: int, rows: int, unique: bool = False, seed: int = 1):
    """A frame of ``parts`` partitions with an int64 ``key`` and a float ``payload``.

    Examples
    --------
    >>> df = keyed_frame(RunContext(client=None, gpus=1), 3, 10, unique=True)
    >>> df.npartitions, int(df.key.max().compute())
    (3, 29)
    """
    import dask.dataframe as dd

    frame = dd.from_map(_keyed_part, range(parts), rows=rows, key_range=parts * rows,
                        unique=unique, seed=seed)
    return _backend(ctx, frame)


def _keyed_size(preset: str, gpus: int, scaling: str) -> Size:
    parts, rows = _check(preset, _KEYED)
    parts = parts * gpus if scaling == "weak" else parts
    total = parts * rows
    return Size(f"{parts} x {rows} rows", total * 16.0, "B", {"parts": parts, "rows": rows})


def _merge_prepare(ctx: RunContext, size: Size):
    parts, rows = size.params["parts"], size.params["rows"]
    return ctx.persist(keyed_frame(ctx, parts, rows), keyed_frame(ctx, parts, rows, unique=True, seed=2))


def _merge(ctx: RunContext, size: Size, frames) -> None:
    left, right = frames
    ctx.persist(left.merge(right, on="key", how="inner", shuffle_method=_method(ctx)))


def _method(ctx: RunContext) -> str | None:
    # dask-cudf shuffles with tasks; pandas frames take Dask's default (p2p).
    return "tasks" if ctx.dataframe_backend == "cudf" else None


MERGE = Workload(
    "merge", "inner merge on key of two persisted frames (all-to-all shuffle of both)",
    "dataframe", _keyed_size, _merge, _merge_prepare)


def _shuffle_prepare(ctx: RunContext, size: Size):
    return ctx.persist(keyed_frame(ctx, size.params["parts"], size.params["rows"]))[0]


def _shuffle(ctx: RunContext, size: Size, frame) -> None:
    ctx.persist(frame.shuffle(on="key", method=_method(ctx)))


SHUFFLE = Workload(
    "shuffle", "shuffle of a persisted frame on key (all-to-all exchange)",
    "dataframe", _keyed_size, _shuffle, _shuffle_prepare)

#: The workloads this module defines (the registry lists them by name).
WORKLOADS = (GROUPBY, ROLLING, MERGE, SHUFFLE)
