"""Aggregation of run records: medians, spread, throughput, scaling efficiency, ratios.

Pure functions over :class:`~hpcgpu.bench.records.RunRecord` values; nothing here
touches a cluster or a file.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

from hpcgpu.bench.records import RunRecord, Summary

__all__ = ["quantile", "summarize", "Ratio", "ratios", "group_key"]


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile with linear interpolation (NumPy's default method).

    Examples
    --------
    >>> quantile([4.0, 1.0, 3.0, 2.0], 0.5)
    2.5
    >>> quantile([1.0, 2.0, 3.0, 4.0, 10.0], 0.25), quantile([1.0, 2.0, 3.0, 4.0, 10.0], 0.75)
    (2.0, 4.0)
    >>> quantile([], 0.5)
    Traceback (most recent call last):
    ...
    ValueError: quantile of no values: at least one successful run is needed
    """
    if not values:
        raise ValueError("quantile of no values: at least one successful run is needed")
    xs = sorted(values)
    position = q * (len(xs) - 1)
    low = int(position)
    high = min(low + 1, len(xs) - 1)
    return xs[low] + (xs[high] - xs[low]) * (position - low)


def group_key(record: RunRecord) -> tuple:
    """The group a record belongs to: (cluster, protocol, workload, scaling, gpus)."""
    return (record.env.cluster, record.env.protocol, record.workload, record.scaling, record.gpus)


def _summary(key: tuple, runs: list[RunRecord]) -> Summary:
    cluster, protocol, workload, scaling, gpus = key
    times = [r.seconds for r in runs if r.ok and r.seconds is not None]
    failed = [r for r in runs if not r.ok]
    median = quantile(times, 0.5) if times else None
    work = runs[0].work
    return Summary(
        cluster=cluster, protocol=protocol, workload=workload, scaling=scaling, gpus=gpus,
        nodes=max(r.env.nodes for r in runs), size=runs[0].size, ok=len(times),
        failed=len(failed), median=median,
        q1=quantile(times, 0.25) if times else None, q3=quantile(times, 0.75) if times else None,
        minimum=min(times) if times else None, maximum=max(times) if times else None,
        throughput=work / median if median and work else None, work_unit=runs[0].work_unit,
        error=failed[0].error if failed else None,
    )


def _with_scaling(group: list[Summary]) -> list[Summary]:
    """Speedup and efficiency relative to the smallest GPU count that succeeded.

    Speedup is the ratio of throughputs (work per second), so one formula serves strong
    scaling (fixed work: the time ratio) and weak scaling (work grows with the GPUs);
    efficiency is speedup divided by the ratio of GPU counts. Without a work measure the
    time ratio is used.
    """
    measured = [s for s in group if s.median is not None]
    if not measured:
        return group
    base = min(measured, key=lambda s: s.gpus)
    out = []
    for s in group:
        if s.median is None:
            out.append(s)
            continue
        if s.throughput and base.throughput:
            speedup = s.throughput / base.throughput
        else:
            speedup = base.median / s.median
        out.append(replace(s, speedup=speedup, efficiency=speedup * base.gpus / s.gpus))
    return out


def summarize(records: Iterable[RunRecord]) -> list[Summary]:
    """One :class:`Summary` per group of measured runs; warm-up runs are left out.

    Examples
    --------
    >>> from hpcgpu.bench.records import RunRecord
    >>> def run(gpus, seconds, repeat=0, status="ok"):
    ...     return RunRecord(sweep="s", workload="w", scaling="strong", gpus=gpus, size="n",
    ...                      work=100.0, work_unit="B", repeat=repeat, warmup=False,
    ...                      status=status, seconds=seconds if status == "ok" else None,
    ...                      error=None if status == "ok" else "boom")
    >>> out = summarize([run(1, 4.0), run(1, 6.0, 1), run(2, 2.5), run(2, None, 1, "failed")])
    >>> [(s.gpus, s.median, s.ok, s.failed, s.throughput) for s in out]
    [(1, 5.0, 2, 0, 20.0), (2, 2.5, 1, 1, 40.0)]
    >>> out[1].speedup, out[1].efficiency, out[1].error
    (2.0, 1.0, 'boom')
    """
    groups: dict[tuple, list[RunRecord]] = defaultdict(list)
    for record in records:
        if not record.warmup:
            groups[group_key(record)].append(record)
    summaries = [_summary(key, runs) for key, runs in groups.items()]
    series: dict[tuple, list[Summary]] = defaultdict(list)
    for s in summaries:
        series[(s.cluster, s.protocol, s.workload, s.scaling)].append(s)
    out = []
    for key in series:
        out.extend(_with_scaling(sorted(series[key], key=lambda s: s.gpus)))
    return out


@dataclass(frozen=True)
class Ratio:
    """The primary cluster's median time over a reference's, for one workload and GPU count.

    ``ratio < 1`` means the primary (hpcgpu) was faster.
    """

    workload: str
    scaling: str
    protocol: str
    gpus: int
    reference: str
    primary_median: float
    reference_median: float

    @property
    def ratio(self) -> float:
        return self.primary_median / self.reference_median


def ratios(summaries: Iterable[Summary], primary: str = "hpcgpu") -> list[Ratio]:
    """Side-by-side ratios: every reference cluster's group against the primary's.

    Examples
    --------
    >>> from hpcgpu.bench.records import Summary
    >>> def s(cluster, median):
    ...     return Summary(cluster, "tcp", "w", "strong", 1, 1, "n", 3, 0, median, None,
    ...                    None, None, None, None, "B")
    >>> [(r.reference, r.ratio) for r in ratios([s("hpcgpu", 1.0), s("dask-cuda", 4.0)])]
    [('dask-cuda', 0.25)]
    """
    summaries = list(summaries)
    mine = {(s.workload, s.scaling, s.protocol, s.gpus): s for s in summaries if s.cluster == primary}
    out = []
    for s in summaries:
        own = mine.get((s.workload, s.scaling, s.protocol, s.gpus))
        if s.cluster == primary or own is None or own.median is None or s.median is None:
            continue
        out.append(Ratio(s.workload, s.scaling, s.protocol, s.gpus, s.cluster, own.median, s.median))
    return out
