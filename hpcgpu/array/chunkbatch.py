"""A reduction's first step over many small blocks, as one call.

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

Blocks made inside the task (generated, ``x.std()`` of ``normal(...)``) reach the step
inside their blockwise subgraph, one after the other: :func:`run_tasks` runs each such
subgraph up to its reduction step, holds the block, and runs the held steps as one call
per shape when a later task reads one of them (the tree's top, collapsed to one node:
:mod:`hpcgpu.array.treecollapse`), or when the held blocks pass :data:`HELD_BYTES`.
"""

from __future__ import annotations

import functools

import numpy as np
from dask._task_spec import GraphNode, Task, TaskRef
from dask.array import reductions
from dask.array.dispatch import concatenate_lookup

from hpcgpu.array.lazy_blocks import BlockStep

__all__ = ["SMALL_BLOCK", "HELD_BYTES", "run_chunks_batched", "run_tasks"]

#: the largest block (bytes) whose reduction step is batched with others of its shape
SMALL_BLOCK = 1 << 16
#: the most bytes of blocks held for a batched step before it runs
HELD_BYTES = 64 << 20

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
    return (task.func, task.kwargs) if _reduction_of(task.func, task.kwargs) else None


def _reduction_of(func, kwargs) -> bool:
    base = func.func if isinstance(func, functools.partial) else func
    return base in _CHUNKS and kwargs.get("keepdims") is True and isinstance(kwargs.get("axis"), tuple) \
        and not any(isinstance(v, (GraphNode, TaskRef)) for v in kwargs.values())


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
        if _small(block, limit):
            groups.setdefault((id(step.layer), *_shape(block)), (call, []))[1].append((step.key, block))
    done = {key for (func, kwargs), held in groups.values() if len(held) > 1 for key in _run_held(func, kwargs, held, values)}
    return tuple(step for step in steps if step.key not in done)


def _small(block, limit: int) -> bool:
    return block is not None and 0 < getattr(block, "nbytes", 0) <= limit  # an empty block: Dask's own case


def _shape(block) -> tuple:
    return type(block), block.shape, block.dtype


def _run_held(func, kwargs, held: list, values: dict) -> list:
    """``func`` over the blocks of ``held`` (``[(key, block)]``) stacked, each key's partial
    result into ``values``; the keys."""
    if len(held) == 1:
        (key, block), = held
        values[key] = func(block, **kwargs)
        return [key]
    stacked = concatenate_lookup.dispatch(type(held[0][1]))([block[None] for _, block in held], axis=0)
    out = func(stacked, **dict(kwargs, axis=tuple(a + 1 for a in kwargs["axis"])))
    for i, (key, _) in enumerate(held):
        values[key] = _take(out, i)
    return [key for key, _ in held]


def _subgraph_reduction(task):
    """``(steps before, function, keywords, key of its block)`` of a blockwise subgraph task
    whose last step is a reduction's chunk function on a block the steps before make."""
    plan = task.args[0].value if task.args and hasattr(task.args[0], "value") else None
    if not isinstance(plan, tuple) or len(plan) != 3 or not plan[0]:
        return None
    *before, last = plan[0]
    if last.key != plan[1] or len(last.args) != 1 or not isinstance(last.args[0], TaskRef) \
            or last.args[0].key not in {s.key for s in before} or not _reduction_of(last.func, last.kwargs):
        return None
    return tuple(before), last.func, last.kwargs, last.args[0].key


def run_tasks(tasks, last_reads, values: dict, run, subgraph=None, limit: int = SMALL_BLOCK) -> dict:
    """``run(task)`` for each of ``tasks`` into ``values``, deleting the keys of
    ``last_reads`` after each; a task of ``subgraph`` (hpcgpu's ``_run_subgraph``) whose
    last step is a reduction's chunk function on a small block is held at that step and
    run with the others of its shape (module docstring)."""
    groups: dict = {}
    held: set = set()
    size = 0
    plans: dict = {}  # a layer's blocks share one plan: each is looked at once
    for task, done in zip(tasks, last_reads):
        if held and not held.isdisjoint(task.dependencies) or size > HELD_BYTES:
            for (func, kwargs), members in groups.values():
                _run_held(func, kwargs, members, values)
            groups, held, size = {}, set(), 0
        found = None
        if subgraph is not None and getattr(task, "func", None) is subgraph:
            plan = task.args[0].value
            found = plans[id(plan)] if id(plan) in plans else plans.setdefault(id(plan), _subgraph_reduction(task))
        if found is None:
            values[task.key] = run(task)
        else:
            before, func, kwargs, block_key = found
            block = subgraph((before, block_key, plan[2]), *(values[a.key] if isinstance(a, TaskRef) else a(values)
                                                             for a in task.args[1:]))  # the steps up to the block
            if _small(block, limit):
                groups.setdefault((id(task.args[0].value), *_shape(block)), ((func, kwargs), []))[1].append((task.key, block))
                held.add(task.key)
                size += block.nbytes
            else:
                values[task.key] = func(block, **kwargs)
        for key in done:
            del values[key]
    for (func, kwargs), members in groups.values():
        _run_held(func, kwargs, members, values)
    return values
