"""Fewer, larger tasks: fuse each small tree of generated blocks into its reduction.

A reduction over generated data (``normal(...)`` -> elementwise -> slicing -> ``sum``)
is, after Dask's linear fusion, one task per block plus a tree of partial reductions:
about 5,900 tasks for the 50 x 50 blocks of the array-sum workload. Each task costs the
scheduler and the worker far more than a GPU needs for a 10000 x 10000 block, so Dask's
per-task cost, not the GPU, sets the time.

This pass fuses every subtree that owns its inputs exclusively (each node has one
dependent, the leaves are generated in the graph) and has at most ``width`` leaves into
one task, which runs its blocks one after the other and frees each intermediate as soon
as it is used: the same operations on the same blocks, in about ``1/width`` as many
tasks. It applies only to graphs with at least ``width ** 2`` leaves, so that at least
``width`` tasks stay for parallelism; ``hpcgpu.array.fuse-width = 0`` turns it off.
"""

from __future__ import annotations

from typing import Any, Mapping

import dask
from dask._task_spec import DataNode, Task
from dask.array.optimization import optimize as dask_array_optimize
from dask.core import reverse_dict

__all__ = ["optimize", "fuse_generated_trees", "DEFAULT_WIDTH"]

#: leaves per fused task: one first-level partial reduction of a 2-D sum (4 x 4 blocks)
DEFAULT_WIDTH = 16


def _run_fused(tasks: tuple, outkey, uses: dict) -> Any:
    """Run ``tasks`` (topologically ordered), dropping each value after its last use."""
    values: dict = {}
    left = dict(uses)
    for task in tasks:
        values[task.key] = task({k: values[k] for k in task.dependencies})
        for dep in task.dependencies:
            left[dep] -= 1
            if not left[dep]:
                del values[dep]  # a GPU block goes back to the pool before the next is made
    return values[outkey]


def _exclusive_leaf_counts(dsk: Mapping, keys: set, width: int) -> dict:
    deps = {k: {d for d in v.dependencies} for k, v in dsk.items()}
    dependents = reverse_dict(deps)
    counts: dict = {}
    for key in _toposort(deps):
        if not deps[key]:
            counts[key] = 1
            continue
        owned = all(d in dsk and counts.get(d) and len(dependents[d]) == 1 and d not in keys
                    for d in deps[key])
        total = sum(counts[d] for d in deps[key]) if owned else 0
        counts[key] = total if 0 < total <= width else 0
    return counts


def _toposort(deps: dict) -> list:
    order, seen = [], set()
    for root in deps:
        stack = [(root, False)]
        while stack:
            key, expanded = stack.pop()
            if expanded:
                order.append(key)
                continue
            if key in seen:
                continue
            seen.add(key)
            stack.append((key, True))
            stack.extend((d, False) for d in deps[key] if d in deps and d not in seen)
    return order


def fuse_generated_trees(dsk: Mapping, keys, width: int = DEFAULT_WIDTH) -> dict:
    """Fuse exclusively owned subtrees of at most ``width`` leaves into single tasks.

    Examples
    --------
    >>> import dask.array as da
    >>> from dask.array.optimization import optimize as plain
    >>> total = (da.ones((64, 64), chunks=4) + 1).sum()
    >>> graph = dict(plain(total.__dask_graph__(), total.__dask_keys__()))
    >>> fused = fuse_generated_trees(graph, total.__dask_keys__())
    >>> len(graph), len(fused)
    (341, 21)
    """
    keys = set(dask.core.flatten(keys))
    if width < 2:
        return dict(dsk)
    counts = _exclusive_leaf_counts(dsk, keys, width)
    if sum(1 for k, v in dsk.items() if not v.dependencies) < width * width:
        return dict(dsk)
    dependents = reverse_dict({k: set(v.dependencies) for k, v in dsk.items()})
    out = dict(dsk)
    for key, count in counts.items():
        parent_fused = any(counts.get(p) for p in dependents[key]) and key not in keys
        if count < 2 or parent_fused:
            continue
        subtree = _subtree(dsk, key)
        for k in subtree:
            del out[k]
        uses = {k: sum(1 for t in subtree if k in dsk[t].dependencies) for k in subtree if k != key}
        tasks = tuple(dsk[k] for k in _toposort({k: set(dsk[k].dependencies) for k in subtree}))
        out[key] = Task(key, _run_fused, DataNode(None, tasks), key, DataNode(None, uses))
    return out


def _subtree(dsk: Mapping, key) -> list:
    found, stack = [], [key]
    while stack:
        k = stack.pop()
        found.append(k)
        stack.extend(dsk[k].dependencies)
    return found


def optimize(dsk, keys, **kwargs):
    """``dask.array``'s optimization followed by :func:`fuse_generated_trees`.

    hpcgpu.array installs it as dask's ``array_optimize``; the width comes from the dask
    config key ``hpcgpu.array.fuse-width`` (default 16, 0 turns the pass off).
    """
    dsk = dask_array_optimize(dsk, keys, **kwargs)
    width = int(dask.config.get("hpcgpu.array.fuse-width", DEFAULT_WIDTH))
    if width < 2:
        return dsk
    return fuse_generated_trees(dict(dsk), list(dask.core.flatten(keys)), width)
