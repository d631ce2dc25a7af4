"""A reduction's tree of combine nodes, inside one task, as one call of its top node.

Dask reduces blocks in a tree: each block's partial result (``chunk``), then nodes that
combine a fixed number of partials each (``-partial-`` keys, ``keepdims=True``), up to the
node that aggregates (``-aggregate-``). Inside one of hpcgpu's fused tasks
(:func:`~hpcgpu.array.optimization.chain_tasks`) the tree's shape buys nothing: 2,500
blocks make 863 combine calls, each concatenating a few small partial results (0.4 s of
Python per compute on a GPU). :func:`collapse` makes the tree's top node read
every leaf of its tree at once, which is what Dask itself does when ``split_every`` is at
least the number of blocks: the same functions on the same partial results, grouped
otherwise (a float sum may differ by rounding).
"""

from __future__ import annotations

import functools
from collections import Counter
from itertools import chain

import numpy as np
from dask._task_spec import Alias, List, Task, TaskRef, _identity_cast
from dask.array import reductions
from toolz.functoolz import Compose

from hpcgpu.array.lazy_blocks import LegacyStep

__all__ = ["collapse", "combine_of", "nested", "reduction_axes"]


def _outer(func):
    """The reducing function of a node's ``func``: Dask composes ``_concatenate2`` under it
    where the reduction concatenates its partials (``sum``), not where it does that itself
    (``mean_combine``)."""
    return (func.funcs or (func.first,))[-1] if isinstance(func, Compose) else func


def _is_list(node) -> bool:
    return isinstance(node, List) or (isinstance(node, Task) and node.key is None and node.func is _identity_cast
                                      and node.kwargs.get("typ") is list)


def _leaf_key(node):
    if isinstance(node, TaskRef):
        return node.key
    if isinstance(node, Alias):
        return next(iter(node.dependencies))
    return None


def _refs(node, depth: int) -> list | None:
    """The keys of a nested list ``depth`` deep, in order; None if ``node`` is not one."""
    if depth == 0:
        key = _leaf_key(node)
        return None if key is None else [key]
    if not _is_list(node):
        return None
    keys: list = []
    for item in node.args:
        inner = _refs(item, depth - 1)
        if inner is None:
            return None
        keys.extend(inner)
    return keys


def reduction_axes(node) -> tuple | None:
    """The axes a Dask tree-reduction node (combine or aggregate) reduces, None for any
    other task: one argument, a nested list as deep as the axes are many, of references.

    Examples
    --------
    >>> import dask.array as da
    >>> from dask._task_spec import convert_legacy_graph
    >>> x = da.ones((64, 64), chunks=8)
    >>> graph = convert_legacy_graph(dict(x.sum(axis=0).__dask_graph__()))
    >>> sorted({reduction_axes(node) for node in graph.values()}, key=str)
    [(0,), None]
    """
    call = _call(node)
    if call is None:
        return None
    func, arg = _outer(call[0]), call[1]
    if not isinstance(func, functools.partial) or not isinstance(func.keywords.get("axis"), tuple):
        return None
    axes = func.keywords["axis"]
    return axes if axes and _node_refs(node, arg, len(axes)) is not None else None


def _call(node) -> tuple | None:
    """``(function, its one argument)`` of a task of one argument: a ``Task``, or a
    ``LegacyStep`` (Dask's tuple, converted only where it runs: a collapsed tree's nodes
    never are)."""
    if isinstance(node, LegacyStep):
        task = node.task
        return (task[0], task[1]) if len(task) == 2 else None
    if not isinstance(node, Task) or node.key is None or len(node.args) != 1 or node.kwargs:
        return None
    return node.func, node.args[0]


def _node_refs(node, arg, depth: int) -> list | None:
    """The keys of ``node``'s argument ``arg``, a nested list ``depth`` deep (:func:`_refs`)."""
    if isinstance(node, LegacyStep):
        return _legacy_refs(arg, depth, node.dependencies)
    return _refs(arg, depth)


def _legacy_refs(arg, depth: int, keys: frozenset) -> list | None:
    """:func:`_refs` of a legacy tuple's argument: lists of keys (a key is one of ``keys``).

    >>> keys = frozenset({("x", 0), ("x", 1)})
    >>> _legacy_refs([("x", 0), ("x", 1)], 1, keys), _legacy_refs([("x", 0), (sum, [("x", 1)])], 1, keys)
    ([('x', 0), ('x', 1)], None)
    """
    if depth == 0:
        try:
            return [arg] if isinstance(arg, (tuple, str)) and arg in keys else None
        except TypeError:  # unhashable: a task nested in the tuple, not a key
            return None
    if type(arg) is not list:
        return None
    found: list = []
    for item in arg:
        inner = _legacy_refs(item, depth - 1, keys)
        if inner is None:
            return None
        found.extend(inner)
    return found


#: combine functions whose partial results give the same answer in any grouping and order
#: (float sums to rounding); not ``arg_combine``, whose ties go to the first index in Dask's order
_ORDER_FREE = frozenset({np.sum, np.prod, np.min, np.max, np.any, np.all, np.nansum, np.nanprod, np.nanmin,
                         np.nanmax, reductions.chunk_min, reductions.chunk_max, reductions._nanmin_skip,
                         reductions._nanmax_skip, reductions.mean_combine, reductions.moment_combine})


def combine_of(node):
    """The function of a tree-reduction node (a ``Task`` or a ``LegacyStep``), if its partial
    results may be combined in any grouping and order; else None.

    Examples
    --------
    >>> import dask.array as da
    >>> from dask._task_spec import convert_legacy_graph
    >>> def combines(y):
    ...     graph = convert_legacy_graph(dict(y.__dask_graph__()))
    ...     return {combine_of(n) is not None for n in graph.values() if reduction_axes(n) and _combines(n)}
    >>> x = da.ones((64, 64), chunks=4)
    >>> combines(x.sum()), combines(x.std()), combines(x.argmax())
    ({True}, {True}, {False})
    """
    func = _call(node)[0]
    base = _outer(func)
    return func if getattr(base, "func", base) in _ORDER_FREE else None


def _combines(node) -> bool:
    """Whether tree-reduction ``node`` is a combine node (not an aggregate)."""
    name = node.key[0] if isinstance(node.key, tuple) else node.key
    return "-partial-" in str(name) and _outer(_call(node)[0]).keywords.get("keepdims") is True


def nested(keys: list, depth: int):
    """``keys`` as a nested list ``depth`` deep with all of them in the innermost list, so
    that ``_concatenate2`` concatenates them in one call per level, not one per key."""
    node = List(*(TaskRef(k) for k in keys))
    for _ in range(depth - 1):
        node = List(node)
    return node


def collapse(steps: tuple) -> tuple:
    """``steps`` (tasks, each after those it reads) with every tree-reduction node that
    reads combine nodes of its own tree (each read by it alone) reading their leaves
    instead, and those combine nodes dropped.

    Examples
    --------
    >>> import dask
    >>> import dask.array as da
    >>> from dask._task_spec import convert_legacy_graph
    >>> total = da.arange(4096, chunks=16).sum()
    >>> graph = convert_legacy_graph(dict(total.__dask_graph__()))
    >>> priority = dask.order.order(graph)
    >>> steps = collapse(tuple(graph[k] for k in sorted(graph, key=priority.get)))
    >>> len(graph), len(steps)  # 84 combine nodes (4 partials each) dropped
    (597, 513)
    >>> int(dask.get({s.key: s for s in steps}, total.__dask_keys__()[0]))
    8386560
    """
    by_key = {step.key: step for step in steps}
    reads = Counter(chain.from_iterable(step.dependencies for step in steps))
    axes_of = {step.key: reduction_axes(step) for step in steps}
    dropped: set = set()
    rebuilt: dict = {}
    for step in reversed(steps):  # the tree's top before its nodes
        axes = axes_of[step.key]
        if axes is None or step.key in dropped:
            continue
        func, arg = _call(step)
        leaves, merged, pending = [], False, list(reversed(_node_refs(step, arg, len(axes))))
        while pending:
            key = pending.pop()
            child = by_key.get(key)
            if child is not None and reads[key] == 1 and axes_of[key] == axes and _combines(child):
                dropped.add(key)
                merged = True
                pending.extend(reversed(_node_refs(child, _call(child)[1], len(axes))))
            else:
                leaves.append(key)
        if merged:
            rebuilt[step.key] = Task(step.key, func, nested(leaves, len(axes)))
    return tuple(rebuilt.get(step.key, step) for step in steps if step.key not in dropped)
