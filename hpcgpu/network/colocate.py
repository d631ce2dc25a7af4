"""Place the producers of chunks that are combined later on the same worker.

Distributed sends root tasks (those that read or generate inputs) to whichever worker
has a free thread. When a chunk made by one root is used by several tasks that each
combine it with a chunk made by another root (block ``(i, j)`` and block ``(j, i)`` of
``x + x.T`` with ``x`` generated in the graph, or any chunk read twice in different
pairings), moving the consumer to the data cannot help: one of its inputs is always
elsewhere, and half of the chunks cross the network on two workers.

:class:`CoLocateRoots` sees each new graph on the scheduler before its tasks run, groups
the roots that such tasks combine (following chains of single-input tasks from each
root), and gives each group one worker, contiguous in Dask's priority order so that
every worker starts at once. Groups that would need more than a worker's share of the
roots (a matmul, where everything meets everything) are left to Dask, and so is every
root that feeds one task only (a reduction: Dask already runs the consumer where its
inputs are). The worker is a loose restriction: if it leaves, any worker may run the task,
and Dask's work stealing may still give a task to an idle worker (its chunk then moves).

When the chunks are already in memory (persisted), their place is fixed, but tasks that
combine the same chunks (``(i, j)`` and ``(j, i)`` of ``x + x.T``: both read the same two)
are decided at once, before any transfer, and Dask sends each to whichever holder it
prefers: two copies cross where one would do. Such tasks get one worker, the one already
holding most of their inputs' bytes (:func:`shared_input_groups`).

Results are the same bits: only where tasks run changes.
"""

from __future__ import annotations

import dask
from dask.core import toposort
from distributed.diagnostics.plugin import SchedulerPlugin

__all__ = ["CoLocateRoots", "root_groups", "assign_groups", "shared_input_groups", "holder"]


def _origins(tasks: list) -> dict:
    """``{task: root}`` for each task reached from a root through single-input tasks
    (``tasks`` in dependency order)."""
    origin: dict = {}
    for ts in tasks:
        deps = ts.dependencies
        if not deps:
            origin[ts] = ts
        elif len(deps) == 1:
            (dep,) = deps
            if dep in origin:
                origin[ts] = origin[dep]
    return origin


def _find(parent: dict, x):
    while parent[x] is not x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


def root_groups(tasks: list, cap: int) -> list[list]:
    """Groups of at least two shared roots that new tasks combine, each of at most ``cap``.

    ``tasks`` are the scheduler's :class:`~distributed.scheduler.TaskState` objects of a
    new graph (or any objects with ``dependencies`` and ``dependents`` sets), in any order.
    A root is shared when a task of its single-input chain feeds two or more tasks.
    """
    new = dict.fromkeys(tasks)
    origin = _origins(toposort(new, dependencies={ts: ts.dependencies & new.keys() for ts in new}))
    shared = {r for t, r in origin.items() if len(t.dependents) > 1}
    parent = {r: r for r in shared}
    for ts in new:
        roots = {origin.get(d) for d in ts.dependencies} & shared
        if len(roots) > 1:
            first, *rest = roots
            for r in rest:
                a, b = _find(parent, first), _find(parent, r)
                if a is not b:
                    parent[b] = a
    groups: dict = {}
    for r in shared:
        groups.setdefault(_find(parent, r), []).append(r)
    return [g for g in groups.values() if 1 < len(g) <= cap]


def assign_groups(groups: list[list], slots: list[tuple[str, int]], priority) -> dict:
    """``{task: worker}``: groups in priority order, cut into contiguous runs per worker in
    proportion to its threads (``slots``: ``(address, nthreads)``).

    Examples
    --------
    >>> assign_groups([["a", "b"], ["c", "d"], ["e", "f"], ["g", "h"]], [("w1", 1), ("w2", 1)], str)
    {'a': 'w1', 'b': 'w1', 'c': 'w1', 'd': 'w1', 'e': 'w2', 'f': 'w2', 'g': 'w2', 'h': 'w2'}
    """
    groups = sorted(groups, key=lambda g: min(map(priority, g)))
    total = sum(map(len, groups))
    threads = sum(n for _, n in slots)
    where, done, index, bound = {}, 0, 0, total * slots[0][1] / threads
    for group in groups:
        while done >= bound and index < len(slots) - 1:
            index += 1
            bound += total * slots[index][1] / threads
        for ts in group:
            where[ts] = slots[index][0]
        done += len(group)
    return where


def shared_input_groups(tasks: list) -> list[list]:
    """Groups of two or more new tasks whose two or more inputs are the same chunks, all in memory.

    ``tasks``: objects with ``dependencies`` whose items have ``who_has`` (the workers
    holding them, empty while not computed).
    """
    groups: dict = {}
    for ts in tasks:
        deps = ts.dependencies
        if len(deps) > 1 and all(d.who_has for d in deps):
            groups.setdefault(frozenset(deps), []).append(ts)
    return [g for g in groups.values() if len(g) > 1]


def holder(deps, load: dict):
    """The worker holding most bytes of ``deps``, the least loaded (``load``) among equals."""
    held: dict = {}
    for d in deps:
        for ws in d.who_has:
            held[ws] = held.get(ws, 0) + d.get_nbytes()
    return max(held, key=lambda ws: (held[ws], -load.get(ws, 0), ws.address))


class CoLocateRoots(SchedulerPlugin):
    """A scheduler plugin giving each group of :func:`root_groups` one worker, and each
    group of :func:`shared_input_groups` the worker that holds most of its inputs.

    ``active`` (default: the dask config key ``hpcgpu.colocate``, false until a GPU run confirms
    the proxy's gain) turns it on and
    off, also at run time (the scaling proxy, ``benchmarks/scaleout_proxy.py``, compares
    both on one cluster).
    """

    name = "hpcgpu-colocate-roots"

    def __init__(self, active: bool | None = None):
        self.active = bool(dask.config.get("hpcgpu.colocate", False)) if active is None else active

    def update_graph(self, scheduler, *, tasks=(), **kwargs) -> None:
        workers = [ws for ws in scheduler.running if ws.nthreads]
        if not self.active or len(workers) < 2:
            return
        new = [ts for key in tasks if (ts := scheduler.tasks.get(key)) is not None and ts.state == "released"
               and ts.run_spec is not None and not (ts.worker_restrictions or ts.host_restrictions
                                                    or ts.resource_restrictions)]
        roots = sum(1 for ts in new if not ts.dependencies)
        groups = root_groups(new, cap=max(2, roots // len(workers)))
        if groups:
            slots = sorted((ws.address, ws.nthreads) for ws in workers)
            for ts, address in assign_groups(groups, slots, lambda t: t.priority or ()).items():
                _restrict(ts, address)
        load: dict = {}
        for group in shared_input_groups(new):
            ws = holder(group[0].dependencies, load)
            load[ws] = load.get(ws, 0) + len(group)
            for ts in group:
                _restrict(ts, ws.address)


def _restrict(ts, address: str) -> None:
    """Run ``ts`` on ``address``, or anywhere if that worker leaves."""
    ts.worker_restrictions = {address}
    ts.loose_restrictions = True
