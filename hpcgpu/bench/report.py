"""Tidy result files (JSON lines, CSV) and markdown tables.

File writers append one line per record as soon as a run ends, so a sweep cut short by
a walltime still leaves every finished run on disk.
"""

from __future__ import annotations

import csv
import json
from dataclasses import fields
from pathlib import Path
from typing import Iterable

from hpcgpu.bench.records import Environment, RunRecord, Summary
from hpcgpu.bench.stats import Ratio

__all__ = [
    "COLUMNS", "append_jsonl", "read_jsonl", "write_csv", "read_csv",
    "format_seconds", "format_rate", "markdown_table", "ratio_table",
]

#: CSV columns: the record's own fields, then the environment's.
COLUMNS = [f.name for f in fields(RunRecord) if f.name != "env"] + [f.name for f in fields(Environment)]


def append_jsonl(path: str | Path, record: RunRecord) -> None:
    """Append one record as one JSON line."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(json.dumps(record.row(), sort_keys=False) + "\n")


def read_jsonl(path: str | Path) -> list[RunRecord]:
    """All records of a JSON-lines file."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    return [RunRecord.from_row(json.loads(line)) for line in lines if line.strip()]


def write_csv(path: str | Path, records: Iterable[RunRecord]) -> None:
    """Write records as CSV, one row per run, header :data:`COLUMNS`."""
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        writer.writeheader()
        for record in records:
            writer.writerow(record.row())


def read_csv(path: str | Path) -> list[RunRecord]:
    """All records of a CSV file written by :func:`write_csv`."""
    with open(path, newline="", encoding="utf-8") as handle:
        return [RunRecord.from_row(row) for row in csv.DictReader(handle)]


def format_seconds(value: float | None) -> str:
    """Seconds with three significant figures; ``-`` for none.

    Examples
    --------
    >>> format_seconds(0.012345), format_seconds(12.345), format_seconds(None)
    ('0.0123', '12.3', '-')
    """
    return "-" if value is None else f"{value:.3g}"


def format_rate(value: float | None, unit: str) -> str:
    """A throughput with an SI prefix: bytes as GB/s, other units per second.

    Examples
    --------
    >>> format_rate(2.5e9, "B"), format_rate(1225 / 0.5, "fits"), format_rate(None, "B")
    ('2.5 GB/s', '2.45e+03 fits/s', '-')
    """
    if value is None:
        return "-"
    if unit == "B":
        return f"{value / 1e9:.3g} GB/s"
    return f"{value:.3g} {unit}/s"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f} %"


def markdown_table(summaries: Iterable[Summary]) -> str:
    """One row per group: median, IQR, runs, throughput, speedup, efficiency.

    A group with failed runs says so in its ``runs`` cell (``2 ok, 1 failed``), and a
    group where every run failed shows ``FAILED`` and the first error instead of times.

    Examples
    --------
    >>> from hpcgpu.bench.records import Summary
    >>> s = Summary("hpcgpu", "tcp", "array-sum", "strong", 2, 1, "n=2000", 3, 0, 0.5, 0.4,
    ...             0.6, 0.4, 0.6, 2e9, "B", 1.9, 0.95)
    >>> print(markdown_table([s]).splitlines()[2])
    | array-sum | strong | hpcgpu | tcp | 2 | 1 | n=2000 | 3 ok | 0.5 | 0.2 | 2 GB/s | 1.9 | 95 % |
    """
    head = ("| workload | scaling | cluster | protocol | GPUs | nodes | size | runs | median s "
            "| IQR s | throughput | speedup | efficiency |")
    lines = [head, "|" + " --- |" * 13]
    for s in summaries:
        runs = f"{s.ok} ok" + (f", {s.failed} failed" if s.failed else "")
        if s.median is None:
            error = (s.error or "").replace("|", "/").replace("\n", " ")[:80]
            cells = [f"FAILED: {error}", "-", "-", "-", "-"]
        else:
            cells = [format_seconds(s.median), format_seconds(s.iqr),
                     format_rate(s.throughput, s.work_unit),
                     "-" if s.speedup is None else f"{s.speedup:.3g}", _percent(s.efficiency)]
        row = [s.workload, s.scaling, s.cluster, s.protocol, str(s.gpus), str(s.nodes), s.size, runs]
        lines.append("| " + " | ".join(row + cells) + " |")
    return "\n".join(lines) + "\n"


def ratio_table(rows: Iterable[Ratio], primary: str = "hpcgpu") -> str:
    """Side-by-side ratios as markdown (``primary / reference``; below 1: primary faster).

    Examples
    --------
    >>> from hpcgpu.bench.stats import Ratio
    >>> print(ratio_table([Ratio("svd", "strong", "tcp", 1, "dask-cuda", 1.0, 2.0)]).splitlines()[2])
    | svd | strong | tcp | 1 | dask-cuda | 1 | 2 | 0.5 |
    """
    lines = [f"| workload | scaling | protocol | GPUs | reference | {primary} median s "
             f"| reference median s | {primary} / reference |", "|" + " --- |" * 8]
    for r in rows:
        lines.append(f"| {r.workload} | {r.scaling} | {r.protocol} | {r.gpus} | {r.reference} "
                     f"| {format_seconds(r.primary_median)} | {format_seconds(r.reference_median)} "
                     f"| {r.ratio:.3g} |")
    return "\n".join(lines) + "\n"
