"""Reductions over blocks computed before: a task per group of blocks, then one final combine.

A reduction over a persisted array reads blocks that the graph does not hold: they are in
the workers' memory already. Dask's tree combines a fixed number of blocks per node (4 x 4
for a 2-D reduction), so the trees that :func:`~hpcgpu.array.graphtrees.exclusive_trees`
fuses hold 16 blocks each whatever the width, and the nodes above them stay tasks of
their own. :func:`regroup` packs the fused trees under those nodes into tasks of about
``width`` blocks each, and makes the nodes above the packs, up to the output key, one
final task: the same functions on the same blocks. Where those nodes are one reduction's
tree to one output (``x.mean()``), each pack combines its trees' partial results into one
with the tree's combine function and the final task aggregates one per pack; otherwise each
tree's partial result is passed on and the final task runs the nodes' combines as one call
(:mod:`hpcgpu.array.treecollapse`). Either way the same partials, grouped otherwise, so a
float sum may differ by rounding. Where the
scheduler runs in the optimiser's process (it does where it materialises the graph), each
pack holds blocks of one worker (:func:`holders`), so no block moves; elsewhere
neighbouring blocks (key order). Trees over generated blocks alone are left as they are.
"""

from __future__ import annotations

import math
import operator
from collections import Counter
from dataclasses import dataclass
from itertools import chain
from typing import Any, Callable

from dask._task_spec import DataNode, Task, TaskRef

from hpcgpu.array.treecollapse import collapse, combine_of, nested, reduction_axes

__all__ = ["computed_inputs", "leaf_count", "reads_per_key", "inputs_of", "fused_task", "regroup", "holders"]


def computed_inputs(dsk) -> set:
    """The keys that ``dsk`` reads but does not hold: blocks computed before (persisted)."""
    return {d for node in dsk.values() for d in node.dependencies if d not in dsk}


def leaf_count(dsk, computed: set) -> int:
    """Blocks a reduction over ``dsk`` starts from: its keys without dependencies (generated
    blocks) and the blocks it reads that were computed before."""
    return sum(1 for node in dsk.values() if not node.dependencies) + len(computed)


def reads_per_key(dsk) -> int:
    """The most blocks computed before that one key reads (2 for ``x + x.T``), at least 1:
    the width of trees that each start from one key's blocks."""
    return max((sum(1 for d in node.dependencies if d not in dsk) for node in dsk.values()), default=1) or 1


def inputs_of(steps) -> tuple:
    """The keys that ``steps`` read and none of them makes, in the order first read.

    >>> from types import SimpleNamespace as Step
    >>> inputs_of([Step(key="a", dependencies=("x",)), Step(key="b", dependencies=("a", "y", "x"))])
    ('x', 'y')
    """
    made = {step.key for step in steps}
    return tuple(dict.fromkeys(d for step in steps for d in step.dependencies if d not in made))


def fused_task(key, steps: tuple, run: Callable, packed: Callable, *args) -> Task:
    """The task ``run(packed(steps), key, *args, names, *blocks)``: ``blocks`` are the
    values of the keys ``names`` that ``steps`` read and none of them makes."""
    names = inputs_of(steps)
    if not names:
        return Task(key, run, DataNode(None, packed(steps)), key, *args)
    return Task(key, run, DataNode(None, packed(steps)), key, *args, DataNode(None, names),
                *(TaskRef(name) for name in names))


def _collect(*values) -> tuple:
    """The results of a pack's trees, in order."""
    return values


def _pack_key(parent, index: int):
    return (f"{parent[0]}-pack", *parent[1:], index) if isinstance(parent, tuple) else (f"{parent}-pack", index)


def _in_order(keys) -> list:
    """``keys`` in key order (neighbouring blocks next to each other) where they compare."""
    try:
        return sorted(keys)
    except TypeError:
        return list(keys)


def holders(keys: list) -> dict:
    """``{key: the address of a worker that holds it}`` for blocks computed before, where
    the scheduler that holds them runs in this process (the optimiser runs there when
    the scheduler materialises the graph: ``LocalGPUCluster``, ``hpcgpu run``); empty
    elsewhere, or if its state changed while read."""
    try:
        from distributed import Scheduler
    except ImportError:
        return {}
    for scheduler in list(getattr(Scheduler, "_instances", ())):  # distributed's own registry
        tasks = scheduler.tasks
        if keys and keys[0] in tasks:
            try:
                return {k: min(ws.address for ws in tasks[k].who_has) for k in keys if k in tasks and tasks[k].who_has}
            except RuntimeError:  # changed size during iteration: another thread moved a block
                return {}
    return {}


def _runs(children: list, sizes: dict, width: int, where: dict) -> list[list]:
    """``children`` in contiguous runs of about equal size, at most about ``width`` each,
    a new run wherever the worker that holds their blocks (``where``) changes."""
    total = sum(sizes[c] for c in children)
    target = total / math.ceil(total / width)
    runs, current, size = [], [], 0
    for child in children:
        if current and (size + sizes[child] > target * 1.0001 or where.get(child) != where.get(current[-1])):
            runs.append(current)
            current, size = [], 0
        current.append(child)
        size += sizes[child]
    return runs + [current]


def _above(dsk, trees: list, keys: set, uses: Counter) -> tuple[dict, dict]:
    """The nodes above the trees: ``{node: the roots of trees it reads}`` for each node
    outside the trees that reads only such roots (each read by it alone, none an output
    key) and such nodes; the number of blocks each tree starts from; and the first block
    computed before that each tree reads. Empty unless some trees read such blocks.
    ``uses``: each key's number of readers in ``dsk``."""
    roots = dict(trees)
    sizes, first = {}, {}
    for root, order in trees:
        outside = [d for k in order for d in dsk[k].dependencies if d not in dsk]
        sizes[root] = len(outside) + sum(1 for k in order if not dsk[k].dependencies)
        if outside:
            first[root] = outside[0]
    above: dict = {}
    grown = bool(first)
    while grown:  # dsk's order is almost always dependency order: one or two rounds
        grown = False
        for key, node in dsk.items():
            deps = node.dependencies
            if key in above or key in roots or not deps:
                continue
            if all(d in above or d in roots and uses[d] == 1 and d not in keys for d in deps):
                above[key] = [d for d in deps if d in roots]
                grown = True
    return above, sizes, first


def regroup(out: dict, dsk, trees: list, keys: set, width: int, fused: Callable, placed: dict) -> dict:
    """``out`` (``dsk`` with each of ``trees`` fused) with the trees under the nodes of
    :func:`_above` packed into tasks of about ``width`` blocks each (neighbours in key
    order, whichever node reads them; one worker's blocks per pack where ``placed`` says
    which worker holds each block, :func:`holders`), and those nodes one task per output
    key (:func:`_fuse_top`); ``fused(key, steps)`` makes a fused task."""
    uses = Counter(chain.from_iterable(node.dependencies for node in dsk.values()))
    above, sizes, first = _above(dsk, trees, keys, uses)
    where = {c: placed.get(first.get(c)) for c in chain.from_iterable(above.values())}
    children = sorted(_in_order(chain.from_iterable(above.values())), key=lambda c: where[c] or "")
    runs = _runs(children, sizes, width, where) if children else []
    roots, picked = dict(trees), {}
    packs = [(_pack_key(run[0], len(run)), run) for run in runs] if len(runs) < len(children) else []
    one = _one_tree(dsk, above, keys, children, uses) if packs else None  # else each tree is a task already
    for pack, run in packs:
        steps = tuple(dsk[k] for c in run for k in roots[c])
        if one:  # the pack's partial results combined: one partial result leaves the task
            last = Task(pack, one.combine, nested(run, one.depth))
        else:
            last = Task(pack, _collect, *(TaskRef(c) for c in run))
            picked.update((c, Task(c, operator.getitem, TaskRef(pack), i)) for i, c in enumerate(run))
        out[pack] = fused(pack, steps + (last,))
        for c in run:
            del out[c]
    if one:
        for key in one.order:
            del out[key]
        top = Task(one.top.key, one.top.func, nested([pack for pack, _ in packs], one.depth))
        out[one.key] = fused(one.key, tuple(top if s.key == top.key else s for s in one.steps))
        return out
    top = {key: (*(picked[c] for c in deps if c in picked), dsk[key]) for key, deps in above.items()}
    return _fuse_top(out, top, keys, fused, uses)  # packing changed no reader of a node above


@dataclass(frozen=True)
class _OneTree:
    """The nodes above the trees, where they are one reduction's tree to one output key:
    their ``steps`` with the combine nodes dropped (:func:`collapse`), the ``top`` node that
    read them, the ``combine`` function, the ``depth`` of the nested lists they read."""

    key: Any
    order: tuple
    steps: tuple
    top: Task
    combine: Callable
    depth: int


def _one_tree(dsk, above: dict, keys: set, children, uses: Counter) -> _OneTree | None:
    """The nodes above the trees as :class:`_OneTree` when every one of them is under one
    output key, read by no other node, and they are a reduction tree over all the trees
    whose partial results may be combined in any grouping and order (:func:`combine_of`:
    the same functions grouped otherwise, as Dask does with another ``split_every``); else
    None."""
    outputs = keys & above.keys()
    if len(outputs) != 1:
        return None
    (key,) = outputs
    order = tuple(_postorder(key, dsk, above))
    if len(order) != len(above) or any(uses[k] != 1 for k in order[:-1]):
        return None
    steps = collapse(tuple(dsk[k] for k in order))
    kept = {step.key for step in steps}
    dropped = [k for k in order if k not in kept]
    tops = [step for step in steps if step is not dsk[step.key]]
    if len(tops) != 1 or not dropped or set(tops[0].dependencies) != set(children):
        return None
    (top,), combine = tops, combine_of(dsk[dropped[0]])
    return None if combine is None else _OneTree(key, order, steps, top, combine, len(reduction_axes(top)))


def _fuse_top(out: dict, top: dict, keys: set, fused: Callable, uses: Counter) -> dict:
    """``out`` with the nodes above the packs or trees (``top``: each one's steps) one fused
    task per output key among them, where each other node is read by one node; any left
    (read by several) one task each; ``uses``: each node's number of readers."""
    for key in keys & top.keys():
        order = _postorder(key, out, top)
        if any(uses[k] != 1 or k in keys for k in order[:-1]):
            continue  # a node another one reads too
        steps = tuple(chain.from_iterable(top.pop(k) for k in order))
        for k in order:
            del out[k]
        out[key] = fused(key, steps)
    for key, steps in top.items():
        if len(steps) > 1:  # a node that reads packs, not taken into an output's task
            out[key] = fused(key, steps)
    return out


def _postorder(key, out: dict, within: set) -> list:
    """The keys of ``within`` under ``key`` (``key`` last), each after its dependencies."""
    order, seen, stack = [], set(), [(key, False)]
    while stack:
        k, done = stack.pop()
        if done:
            order.append(k)
        elif k not in seen:
            seen.add(k)
            stack.append((k, True))
            stack.extend((d, False) for d in out[k].dependencies if d in within)
    return order
