"""The named workload registry: the built-in workloads by name, and user additions.

The workloads' modules import only :mod:`hpcgpu.bench.workload`; this registry imports
them (never the other way round) and lists what each exports in ``WORKLOADS``.
"""

from __future__ import annotations

from hpcgpu.bench import workloads_array, workloads_frame
from hpcgpu.bench.workload import PRESETS, SCALINGS, RunContext, Size, Workload

__all__ = [
    "PRESETS", "SCALINGS", "Size", "Workload", "RunContext", "REGISTRY", "register",
    "get_workload", "resolve_workloads",
]

REGISTRY: dict[str, Workload] = {w.name: w for w in (*workloads_array.WORKLOADS, *workloads_frame.WORKLOADS)}



def register(workload: Workload) -> Workload:
    """Add ``workload`` to :data:`REGISTRY` (replacing one of the same name)."""
    REGISTRY[workload.name] = workload
    return workload


def get_workload(name: str, registry: dict[str, Workload] | None = None) -> Workload:
    """The workload called ``name``; a ValueError lists the known names otherwise.

    Examples
    --------
    >>> get_workload("array-sum").kind
    'array'
    >>> get_workload("array_sum")
    Traceback (most recent call last):
    ...
    ValueError: workload 'array_sum' is unknown: choose from array-sum, bootstrap, groupby, many-fits, merge, noop, rolling, shuffle, svd, transpose-sum
    """
    registry = REGISTRY if registry is None else registry
    if name not in registry:
        raise ValueError(f"workload {name!r} is unknown: choose from {', '.join(sorted(registry))}")
    return registry[name]


def resolve_workloads(names: str | None, registry: dict[str, Workload] | None = None) -> list[Workload]:
    """Workloads from a comma-separated list (``None`` or ``all``: every one).

    Examples
    --------
    >>> [w.name for w in resolve_workloads("svd,array-sum")]
    ['svd', 'array-sum']
    """
    registry = REGISTRY if registry is None else registry
    if names in (None, "", "all"):
        return [registry[n] for n in sorted(registry)]
    return [get_workload(n.strip(), registry) for n in names.split(",") if n.strip()]

