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
    dependent, none is an output key but the root), in dependency order. A key that
    ``dsk`` reads but does not hold (a block computed before: a persisted array's) is a
    leaf of each tree that reads it, not listed: the fused task is given its value; a tree
    that reads such keys may have one leaf, or be one key.

    ``shared``: leaves (keys without dependencies) that every tree reading them may hold a
    copy of, whatever their number of dependents: blocks cheaper to make again than to
    send (a generated block read by ``x + x.T``). A tree lists such a leaf once per key
    that reads it, right before that key (a block made per read, freed after it), and
    counts it once per read.

    One walk over the graph in dependency order (dsk's own order when it is one, as
    :func:`~hpcgpu.array.lazy_blocks.lazy_graph` makes it), carrying each candidate
    tree's keys up to its parent (its first dependency's list extended in place): no
    per-tree walks and no dependents lists.
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
    members: dict = {}  # the keys of each candidate tree of 2 or more keys not yet taken into its parent's
    computed: set = set()  # the candidate trees that read keys computed before
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
                total += 1  # computed before (a persisted block): a leaf the fused task is given
                computed.add(key)
            elif owned:
                owned = bool(count) and d not in keys and (uses[d] == 1 or d in shared)
                total += count
                if d in computed:
                    computed.add(key)
        if not owned or total > width:
            counts[key] = 0
            continue
        counts[key] = total
        ordered = [d for d in tuple(deps)[::-1] if d in counts]  # the last dependency's tree first
        if not ordered:
            members[key] = [key]
            continue
        if len(ordered) > 1 and not shared.isdisjoint(ordered):
            ordered = sorted(ordered, key=shared.__contains__)  # the shared leaves last: each made just before its reader
        # the first dependency's list grows in place: along a chain, no key is copied
        listed = [ordered[0]] if ordered[0] in shared else members.pop(ordered[0], None) or [ordered[0]]
        for d in ordered[1:]:
            listed += [d] if d in shared else members.pop(d, None) or [d]
        listed.append(key)
        members[key] = listed
    return [(key, tree) for key, tree in members.items() if (counts[key] >= 2 or key in computed) and key not in shared]
