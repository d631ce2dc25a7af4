"""Running a fused task's steps on lazy blocks (the hook of :mod:`hpcgpu.array.optimization`).

Each step of a fused chain runs first on lazy blocks: sources of :mod:`hpcgpu.array.random`
give :class:`~hpcgpu.array.fused.expr.LazyBlock` leaves, blocks in memory are wrapped as
leaves, and the elementwise steps, slices and reductions of the chain only record
themselves. A step that does anything else raises, and runs again on computed blocks,
exactly as without this module; the chain's output is computed before it leaves the task.
So a block's ``source -> elementwise -> slice -> reduction`` chain costs one kernel and
any other chain what it cost before.

The dask config key ``hpcgpu.array.fused-kernels`` chooses: ``"auto"`` (default) fuses
CuPy blocks, ``True`` also NumPy blocks (replayed step by step: for tests), ``False``
nothing.
"""

from __future__ import annotations

import contextvars
import contextlib

import dask

from hpcgpu.array.fused.expr import LazyBlock, force_all
from hpcgpu.array.fused.nodes import ArrayLeaf, RandomLeaf

__all__ = ["fused_backends", "run_step", "lazy_random_block", "force_all"]

_TRACING: contextvars.ContextVar[frozenset] = contextvars.ContextVar("hpcgpu_fused_tracing", default=frozenset())


def fused_backends(mode=None) -> frozenset:
    """The array backends whose blocks fuse, from ``mode`` or ``hpcgpu.array.fused-kernels``.

    Examples
    --------
    >>> sorted(fused_backends())
    ['cupy']
    >>> with dask.config.set({"hpcgpu.array.fused-kernels": False}):
    ...     sorted(fused_backends())
    []
    """
    mode = dask.config.get("hpcgpu.array.fused-kernels", "auto") if mode is None else mode
    if mode is False or mode in ("false", "False", "off"):
        return frozenset()
    return frozenset({"cupy", "numpy"}) if mode is True or mode in ("true", "True", "on") else frozenset({"cupy"})


@contextlib.contextmanager
def _tracing(backends: frozenset):
    token = _TRACING.set(backends)
    try:
        yield
    finally:
        _TRACING.reset(token)


def lazy_random_block(backend, seed, method, args, dtype, shape, block_id):
    """A lazy random block while a fused step runs (None otherwise: compute it)."""
    if backend not in _TRACING.get():
        return None
    from hpcgpu.array.seeds import block_seed

    key = block_seed(seed, block_id)
    return LazyBlock(RandomLeaf(backend, seed, method, args, dtype, shape, key, block_id), backend)


def _wrapped(value, backends: frozenset):
    kind = type(value).__module__.split(".")[0]
    if kind in backends and type(value).__name__ == "ndarray" and value.ndim:
        return LazyBlock(ArrayLeaf(value), kind)
    return value


def run_step(task, values: dict, backends: frozenset):
    """``task(values)`` on lazy blocks where it can, on computed blocks otherwise."""
    with _tracing(backends):
        try:
            return _traced(task, {k: _wrapped(values[k], backends) for k in task.dependencies}, backends)
        except Exception:  # noqa: BLE001 - any failure: the step runs as it always did, below
            pass
    return task({k: force_all(values[k]) for k in task.dependencies})


def _traced(task, values: dict, backends: frozenset):
    """``task(values)``; a blockwise-fused task step by step, so that a block made inside
    it (``ones``, ``full``, a slice of an array in memory) enters the expression as a leaf."""
    from dask._task_spec import TaskRef


    if task.func is not _run_subgraph:
        return task(values)
    steps, outkey, inkeys = task.args[0].value
    inner = {k: values[a.key] if isinstance(a, TaskRef) else a(values) for k, a in zip(inkeys, task.args[1:])}
    for step in steps:
        inner[step.key] = _wrapped(step(inner), backends)
    return inner[outkey]


def _run_subgraph(plan: tuple, *dependencies):
    """``dask._task_spec._execute_subgraph`` with its steps ordered once, not on every call."""
    steps, outkey, inkeys = plan
    values = dict(zip(inkeys, dependencies))
    for task in steps:
        values[task.key] = task(values)
    return values[outkey]
