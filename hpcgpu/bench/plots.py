"""PNG plots of a sweep: time and parallel efficiency against GPUs, with the ideal lines.

matplotlib is imported when a plot is made (with the non-interactive Agg backend), so
the rest of the harness works where it is not installed.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Iterable

from hpcgpu.bench.records import Summary

__all__ = ["plot_sweeps", "ideal_times"]


def ideal_times(base_gpus: int, base_seconds: float, gpus: list[int], scaling: str) -> list[float]:
    """Perfect scaling from the smallest GPU count: time ~ 1/GPUs (strong) or flat (weak).

    Examples
    --------
    >>> ideal_times(1, 8.0, [1, 2, 4], "strong")
    [8.0, 4.0, 2.0]
    >>> ideal_times(1, 8.0, [1, 2, 4], "weak")
    [8.0, 8.0, 8.0]
    """
    if scaling == "weak":
        return [base_seconds for _ in gpus]
    return [base_seconds * base_gpus / n for n in gpus]


def _figure(workload: str, scaling: str, series: dict[str, list[Summary]]):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_time, ax_eff) = plt.subplots(1, 2, figsize=(10, 4))
    all_gpus: set[int] = set()
    for label, points in sorted(series.items()):
        points = [p for p in points if p.median is not None]
        if not points:
            continue
        gpus = [p.gpus for p in points]
        all_gpus.update(gpus)
        medians = [p.median for p in points]
        low = [p.median - p.q1 for p in points]
        high = [p.q3 - p.median for p in points]
        line = ax_time.errorbar(gpus, medians, yerr=[low, high], marker="o", capsize=3, label=label)
        ideal = ideal_times(gpus[0], medians[0], gpus, scaling)
        ax_time.plot(gpus, ideal, linestyle="--", color=line[0].get_color(), alpha=0.5)
        ax_eff.plot(gpus, [100 * (p.efficiency or 0) for p in points], marker="o", label=label)
    ticks = sorted(all_gpus)
    ax_eff.axhline(100, linestyle="--", color="gray", label="ideal")
    for ax in (ax_time, ax_eff):
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks or [1], [str(t) for t in ticks] or ["1"])
        ax.set_xlabel("GPUs")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
    ax_time.set_yscale("log")
    ax_time.set_ylabel("seconds (median, IQR bars; dashed: ideal)")
    ax_eff.set_ylabel("parallel efficiency (%)")
    ax_eff.set_ylim(bottom=0)
    fig.suptitle(f"{workload}: {scaling} scaling")
    fig.tight_layout()
    return fig


def plot_sweeps(summaries: Iterable[Summary], directory: str | Path) -> list[Path]:
    """One PNG per (workload, scaling), a line per (cluster, protocol); returns the paths.

    Groups where every run failed are left out of the lines (the tables report them).
    """
    import matplotlib.pyplot as plt

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    plots: dict[tuple[str, str], dict[str, list[Summary]]] = defaultdict(lambda: defaultdict(list))
    for s in summaries:
        plots[(s.workload, s.scaling)][f"{s.cluster} ({s.protocol})"].append(s)
    written = []
    for (workload, scaling), series in sorted(plots.items()):
        if not any(p.median is not None for points in series.values() for p in points):
            continue
        fig = _figure(workload, scaling, {k: sorted(v, key=lambda p: p.gpus) for k, v in series.items()})
        path = directory / f"{workload}-{scaling}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        written.append(path)
    return written
