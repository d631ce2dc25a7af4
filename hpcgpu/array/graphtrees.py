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
    :func:`~hpcgpu.array.lazy_blocks.lazy_graph` makes it), carrying each candidate
    tree's keys up to its parent: no per-tree walks and no dependents lists.
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
    members: dict = {}  # the keys of each candidate tree not yet taken into its parent's
    for key in order:
        deps = dsk[key].dependencies
        if not deps:
            counts[key], members[key] = 1, [key]
            continue
        total, owned = 0, True
        for d in deps:
            count = counts.get(d)
            if count is None and d in dsk:
                raise _OutOfOrder(d)
            owned = owned and bool(count) and d not in keys and (uses[d] == 1 or d in shared)
            total += count or 0
        counts[key] = total if owned and total <= width else 0
        if counts[key]:  # its dependencies' trees become part of its own (last dependency first)
            ordered = reversed(tuple(deps))
            if shared:  # the shared leaves last: each made just before its reader
                ordered = sorted(ordered, key=lambda d: d in shared)
            members[key] = [k for d in ordered for k in ([d] if d in shared else members.pop(d))] + [key]
    return [(key, tree) for key, tree in members.items() if counts[key] >= 2 and key not in shared]

