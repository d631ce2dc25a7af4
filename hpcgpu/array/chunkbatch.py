"""A reduction's first step over many small blocks computed before, as one call.

A reduction over a persisted array applies its ``chunk`` function (``sum``, ``mean_chunk``,
``moment_chunk``...) to each block: with small blocks that is one Python call and a few
kernel launches per block, 0.1-0.3 ms each, whatever the block holds. Inside a fused task
(:mod:`hpcgpu.array.regroup`) the blocks of one shape are stacked along a new first axis
and the function runs once over the stack with its axes moved by one: its partial
results, one per block along that axis, are the ones each block gives alone (the same
arithmetic over the same elements). Only Dask's own chunk functions of the reductions that
compute along the axes they are given (not ``arg*``, whose partial results carry block
offsets), and only blocks of at most :data:`SMALL_BLOCK` bytes (a larger block costs more
to copy than the calls it saves).
"""

from __future__ import annotations

import functools

import numpy as np
from dask._task_spec import GraphNode, Task, TaskRef
from dask.array import reductions
from dask.array.dispatch import concatenate_lookup

from hpcgpu.array.lazy_blocks import BlockStep

__all__ = ["SMALL_BLOCK", "run_chunks_batched"]

#: the largest block (bytes) whose reduction step is batched with others of its shape
SMALL_BLOCK = 1 << 16

_CHUNKS = frozenset({np.sum, np.prod, np.any, np.all, np.min, np.max, np.nansum, np.nanprod, np.nanmin,
                     np.nanmax, reductions.chunk_min, reductions.chunk_max, reductions._nanmin_skip,
                     reductions._nanmax_skip, reductions.mean_chunk, reductions.moment_chunk})


def _chunk_call(step) -> tuple | None:
    """``(function, keywords)`` of a step that applies a reduction's chunk function to one
    block as it is (``keepdims=True`` over a tuple of axes); None for any other step."""
    if not isinstance(step, BlockStep) or len(step.dependencies) != 1 or step.inputs[0][1] is not None:
        return None
    task = step.layer.task
    if not isinstance(task, Task) or len(task.args) != 1 or not isinstance(task.args[0], TaskRef):
        return None
    func = task.func
    base = func.func if isinstance(func, functools.partial) else func
    kwargs = task.kwargs
    if base not in _CHUNKS or kwargs.get("keepdims") is not True or not isinstance(kwargs.get("axis"), tuple) \
            or any(isinstance(v, (GraphNode, TaskRef)) for v in kwargs.values()):
        return None
    return func, kwargs


def _take(out, i: int):
    return {k: v[i] for k, v in out.items()} if isinstance(out, dict) else out[i]


def run_chunks_batched(steps, values: dict, limit: int = SMALL_BLOCK) -> tuple:
    """Run the steps that apply a reduction's chunk function to a small block in
    ``values``, one call per layer and block shape (2 blocks or more), into ``values``;
    the other steps, in order.

    Examples
    --------
    >>> import dask.array as da
    >>> from hpcgpu.array.lazy_blocks import lazy_graph
    >>> x = da.arange(64.0, chunks=8)
    >>> graph = lazy_graph(x.sum().__dask_graph__())
    >>> steps = sorted((s for s in graph.values() if isinstance(s, BlockStep) and s.layer.output.startswith("sum")),
    ...                key=lambda s: s.key)
    >>> values = {(x.name, i): np.arange(8.0) + 8 * i for i in range(8)}
    >>> run_chunks_batched(steps, values)
    ()
    >>> [float(values[s.key][0]) for s in steps[:3]]
    [28.0, 92.0, 156.0]
    """
    groups: dict = {}
    for step in steps:
        call = _chunk_call(step)
        block = values.get(step.dependencies[0]) if call else None
        if block is not None and 0 < getattr(block, "nbytes", 0) <= limit:  # an empty block: Dask's own case
            key = (id(step.layer), type(block), block.shape, block.dtype)
            groups.setdefault(key, (call, []))[1].append(step)
    done: set = set()
    for (_, kind, _, _), ((func, kwargs), members) in groups.items():
        if len(members) < 2:
            continue
        stacked = concatenate_lookup.dispatch(kind)([values[s.dependencies[0]][None] for s in members], axis=0)
        out = func(stacked, **dict(kwargs, axis=tuple(a + 1 for a in kwargs["axis"])))
        for i, step in enumerate(members):
            values[step.key] = _take(out, i)
            done.add(step.key)
    return tuple(step for step in steps if step.key not in done)
