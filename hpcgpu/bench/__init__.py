"""Scaling benchmarks: named workloads, sweeps over GPU counts, tidy results, tables, plots.

``hpcgpu bench`` is the command line; :func:`run_sweep` the Python entry point. Names
are imported lazily so that ``import hpcgpu.bench`` loads neither Dask nor matplotlib.
"""

from __future__ import annotations

from hpcgpu.system.lazy import lazy_getattr

#: public name -> module that defines it
_EXPORTS = {
    "Environment": "hpcgpu.bench.records",
    "RunRecord": "hpcgpu.bench.records",
    "Summary": "hpcgpu.bench.records",
    "summarize": "hpcgpu.bench.stats",
    "ratios": "hpcgpu.bench.stats",
    "Workload": "hpcgpu.bench.workload",
    "Size": "hpcgpu.bench.workload",
    "RunContext": "hpcgpu.bench.workload",
    "get_workload": "hpcgpu.bench.registry",
    "resolve_workloads": "hpcgpu.bench.registry",
    "markdown_table": "hpcgpu.bench.report",
    "ratio_table": "hpcgpu.bench.report",
    "read_jsonl": "hpcgpu.bench.report",
    "read_csv": "hpcgpu.bench.report",
    "plot_sweeps": "hpcgpu.bench.plots",
    "SweepSpec": "hpcgpu.bench.runner",
    "run_sweep": "hpcgpu.bench.runner",
    "write_outputs": "hpcgpu.bench.runner",
}

__all__ = list(_EXPORTS)

__getattr__ = lazy_getattr(__name__, _EXPORTS)
