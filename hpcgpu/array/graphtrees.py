"""The subtrees of a task graph that their roots own exclusively, found in one walk.

:func:`hpcgpu.array.optimization.fuse_generated_trees` makes each such tree one task.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain
from typing import Mapping

from dask.core import toposort

__all__ = ["exclusive_trees"]


def exclusive_trees(dsk: Mapping, keys: set, width: int, shared=frozenset()) -> list:
    """``[(root, keys of its tree, each after its dependencies)]``: the maximal subtrees of
    2 to ``width`` leaves that their root owns exclusively (each key of the tree has one
    dependent, none is an output key but the root), in dependency order.

    ``shared``: leaves (keys without dependencies) that every tree reading them may hold a
    copy of, whatever their number of dependents: blocks cheaper to make again than to
    send (a generated block read by ``x + x.T``). A tree lists such a leaf once per key
    that reads it, right before that key (a block made per read, freed after it), and
    counts it once per read.

    One walk over the graph in dependency order (dsk's own order when it is one, as
    :func:`~hpcgpu.array.lazy_blocks.lazy_graph` makes it), noting each candidate tree's
    dependencies; then one walk down each maximal tree lists its keys: no dependents
    lists, and no key copied into a larger tree's list at each level.
    """
    uses = Counter(chain.from_iterable(node.dependencies for node in dsk.values()))
    try:
        return _trees_in_order(dsk, dsk, keys, width, uses, shared)
    except _OutOfOrder:
        order = toposort(dsk, dependencies={k: v.dependencies & dsk.keys() for k, v in dsk.items()})
        return _trees_in_order(dsk, order, keys, width, uses, shared)


class _OutOfOrder(Exception):
    """A key came before one of the keys it depends on."""


def _trees_in_order(dsk: Mapping, order, keys: set, width: int, uses: Counter, shared) -> list:
    counts: dict = {}  # leaves under each key it owns exclusively, 0 if not such a tree
    parts: dict = {}  # each tree's root so far: its dependencies in the order its tree lists them
    taken: set = set()  # roots that became part of their dependent's tree
    for key in order:
        deps = dsk[key].dependencies
        if not deps:
            counts[key] = 1
            continue
        total, owned = 0, True
        for d in deps:
            count = counts.get(d)
            if count is None:
                if d in dsk:
                    raise _OutOfOrder(d)
                owned = False
            elif owned:
                owned = bool(count) and d not in keys and (uses[d] == 1 or d in shared)
                total += count
        if not owned or total > width:
            counts[key] = 0
            continue
        counts[key] = total
        listed = deps if len(deps) == 1 else tuple(deps)[::-1]  # the last dependency's tree first
        if len(listed) > 1 and not shared.isdisjoint(listed):
            listed = sorted(listed, key=shared.__contains__)  # the shared leaves last: each made just before its reader
        parts[key] = listed
        taken.update(listed)
    return [(key, _listed(key, parts, shared)) for key in parts
            if key not in taken and counts[key] >= 2 and key not in shared]


def _listed(root, parts: dict, shared) -> list:
    """The keys of ``root``'s tree, each after its dependencies (a shared leaf once per
    key that reads it), in one walk per tree once the search is done: no key lists
    copied into the parent's at every level of the tree."""
    out, roots, walks = [], [root], [iter(parts[root])]
    while walks:
        for d in walks[-1]:
            below = parts.get(d)
            if below is not None and d not in shared:
                roots.append(d)
                walks.append(iter(below))
                break
            out.append(d)
        else:
            walks.pop()
            out.append(roots.pop())
    return out
