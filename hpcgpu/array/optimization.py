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
tasks. The width follows the cluster (``hpcgpu.array.fuse-width: auto``, the default):
about 8 tasks per worker thread, at least 16 leaves each (:func:`auto_width`), in graphs
that give each thread 4 such tasks (:data:`SMALL_GRAPH_TASKS`). A fixed width applies to
graphs of at least ``width ** 2`` leaves, and ``hpcgpu.array.fuse-width = 0`` turns it off.

The blocks of block-local Blockwise layers (``x + 1``, ``x + x.T``) and the nodes of
reduction trees enter the pass unbuilt (:mod:`hpcgpu.array.lazy_blocks`): each fused task
builds its own on the worker, where it also orders blockwise subgraphs once and moves
slices first (:mod:`hpcgpu.array.pushdown`). A generated block that several trees read
(``x`` in ``(x + x.T).sum()``) is made again for each reader, not kept as a task of its
own (:func:`_regenerable`): drawing a block costs less than a task.
"""

from __future__ import annotations

from collections import Counter
from itertools import chain
from typing import Any, Mapping

import dask
from dask._task_spec import DataNode, Task, _execute_subgraph, fuse_linear_task_spec
from dask.array.optimization import _optimize_slices
from dask.array.optimization import optimize as dask_array_optimize
from dask.blockwise import fuse_roots, optimize_blockwise
from dask.core import toposort
from dask.highlevelgraph import HighLevelGraph

from hpcgpu.array.chunkbatch import run_chunks_batched, run_tasks
from hpcgpu.array.fused import LazyBlock, force_all, fused_backends, run_step
from hpcgpu.array.fused.runner import _run_subgraph
from hpcgpu.array.fused.batch import pure_layer, run_alike_chains
from hpcgpu.array.graphtrees import exclusive_trees
from hpcgpu.array.plane import wanted
from hpcgpu.array.plane.idioms import route
from hpcgpu.array.lazy_blocks import BlockStep, LegacyStep, build_blocks, culled, lazy_graph, materialize_remaining
from hpcgpu.array.packed import PackedSteps, gc_paused
from hpcgpu.array.pushdown import push_slices_down
from hpcgpu.array.regroup import computed_inputs, fused_task, holders, leaf_count, reads_per_key, regroup
from hpcgpu.array.treecollapse import collapse
from hpcgpu.array.scope import TASKS_PER_THREAD, Settings, cluster_threads, holds_hpcgpu_array, mark_layer

__all__ = ["optimize", "fuse_generated_trees", "chain_tasks", "mark", "auto_width", "DEFAULT_WIDTH",
           "Settings", "ArrayOptimizer", "cluster_threads", "TASKS_PER_THREAD"]

#: leaves per fused task: one first-level partial reduction of a 2-D sum (4 x 4 blocks)
DEFAULT_WIDTH = 16
#: ``fuse-width: auto`` fuses graphs that give each thread this many tasks of DEFAULT_WIDTH
#: leaves (fewer would idle threads where blocks are large): 64 leaves on 1, 256 on 4 or more
SMALL_GRAPH_TASKS = 4


def mark(array):
    """Return ``array`` (a :class:`dask.array.Array` that hpcgpu.array made), marked so that
    :func:`optimize` applies hpcgpu's passes to graphs that contain it.

    The mark is kept in the array's layer (its ``collection_annotations``, metadata that
    Dask itself only displays), so it travels with the graph to a scheduler in another
    process (``hpcgpu run``, ``scheduler_in_job``, a ``dask scheduler``).

    Examples
    --------
    >>> import dask.array as da
    >>> x = mark(da.ones(4, chunks=2, name="made-by-hpcgpu"))
    >>> holds_hpcgpu_array(x.__dask_graph__()), holds_hpcgpu_array((x + 1).__dask_graph__())
    (True, True)
    >>> holds_hpcgpu_array(da.ones(4, chunks=2, name="a-plain-dask-array").__dask_graph__())
    False

    Dask names an array after its inputs, so a plain ``da.ones(...)`` with the same
    arguments as an ``ha.ones(...)`` made before is the same array, and gets the passes too.
    """
    mark_layer(array)
    _install()
    return array


def _install() -> None:
    """Install :class:`ArrayOptimizer` as dask's ``array_optimize`` at hpcgpu.array's first array,
    not at import (Dask stays as it was); a user's own ``array_optimize`` wins."""
    if dask.config.get("array_optimize", None) is None:
        dask.config.set(array_optimize=ArrayOptimizer())


class ArrayOptimizer:
    """Dask's ``array_optimize`` that takes the client's settings with the graph.

    Dask ships a collection's optimiser with its graph and runs it where the graph is
    materialised: on the scheduler, which may be another process (``hpcgpu run``, a job's
    scheduler) with another config and no client. Pickled, this optimiser carries
    :meth:`Settings.current` as the sending process had them, so the same graph runs in
    every mode; in the sending process it reads them when it runs.

    Examples
    --------
    >>> import pickle
    >>> with dask.config.set({"hpcgpu.array.fuse-width": 8}):
    ...     sent = pickle.dumps(ArrayOptimizer())
    >>> pickle.loads(sent).settings.width
    8
    """

    def __init__(self, settings: Settings | None = None):
        self.settings = settings

    def __call__(self, dsk, keys, **kwargs):
        return optimize(dsk, keys, settings=self.settings, **kwargs)

    def __reduce__(self):
        return ArrayOptimizer, (self.settings or Settings.current(),)

    def __repr__(self) -> str:
        return f"ArrayOptimizer({self.settings!r})"


def chain_tasks(steps, pushdown: bool = True) -> tuple[Task, ...]:
    """The tasks a fused chain runs, in order: its blocks built, blockwise subgraphs ordered
    once, slices moved first (``pushdown``), a reduction's combine nodes one call (:func:`collapse`)."""
    plans: dict = {}
    steps = collapse(tuple(steps))  # before the nodes are built: a dropped one never is
    built = build_blocks([s for s in steps if isinstance(s, BlockStep)], lambda t: _without_dask_order(t, plans))
    tasks = [_without_dask_order(built[s.key] if isinstance(s, BlockStep) else s.build()
                                 if isinstance(s, LegacyStep) else s, plans) for s in steps]
    return tuple(push_slices_down(tasks, _run_subgraph) if pushdown else tasks)


def _run_fused(packed: PackedSteps, outkey, pushdown: bool, backends: frozenset | None = None, names=(), *blocks) -> Any:
    """Run one fused tree: its groups of alike block chains as one kernel each
    (:mod:`hpcgpu.array.fused.batch`), then the rest step by step (:func:`_run_steps`).
    ``backends``: those whose chains run as generated kernels (None: this worker's config);
    ``blocks``: the values of the keys ``names`` that the steps read and none makes."""
    backends = fused_backends() if backends is None else backends
    values = dict(zip(names, blocks))  # a reduction's step over small ones: one call (chunkbatch)
    steps = run_chunks_batched(packed.steps(), values) if blocks else packed.steps()
    if blocks and not any(type(b).__module__.split(".")[0] in backends for b in blocks) \
            and all(step.dependencies for step in steps):
        backends = frozenset()  # nothing generated, blocks no backend fuses (NumPy under "auto"): untraced
    if backends:
        made, steps = run_alike_chains(steps, lambda chain: _run_steps(chain, {}, pushdown, backends)[chain[-1].key],
                                       backends)
        if made and not any(isinstance(v, LazyBlock) for v in made.values()):
            backends = frozenset()  # the first chain recorded nothing (NumPy blocks under "auto"): nor will the rest
        values.update(made)
    return force_all(_run_steps(steps, values, pushdown, backends)[outkey])


def _run_steps(steps, values: dict, pushdown: bool, backends: frozenset) -> dict:
    """Run ``steps`` (:func:`chain_tasks`) into ``values``, dropping each value after its last use."""
    tasks = chain_tasks(steps, pushdown)  # each value dropped after its last use: a GPU block back to the pool
    # a task gets what it reads: dask's Task sets every value it is given, per call (quadratic)
    run = (lambda task: run_step(task, values, backends)) if backends else \
        (lambda task: task({key: values[key] for key in task.dependencies}))
    return run_tasks(tasks, _last_reads(tasks), values, run, None if backends else _run_subgraph)  # chunkbatch


def _last_reads(tasks: list) -> list:
    """Per task, the keys it reads last before they are made again (once per reader) or ever."""
    later, out = set(), []
    for task in reversed(tasks):
        out.append([key for key in task.dependencies if key not in later])
        later.discard(task.key)
        later.update(task.dependencies)
    return out[::-1]


def fuse_generated_trees(dsk: Mapping, keys, width: int = DEFAULT_WIDTH, pushdown: bool = True,
                         min_leaves: int | None = None, backends: frozenset | None = None) -> dict:
    """Fuse exclusively owned subtrees of at most ``width`` leaves into single tasks, in
    graphs of at least ``min_leaves`` leaves (default ``width ** 2``).

    With ``pushdown``, slices inside the fused chains move before elementwise operations
    (:mod:`hpcgpu.array.pushdown`); ``backends`` are those whose chains run as generated
    kernels (:func:`~hpcgpu.array.fused.fused_backends`; None: the worker's config).

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
    keys, computed = set(dask.core.flatten(keys)), computed_inputs(dsk)
    min_leaves = width * width if min_leaves is None else min_leaves
    if width < 2 or leaf_count(dsk, computed) < min_leaves:
        return dict(dsk)
    out, shared = dict(dsk), _regenerable(dsk)
    # BlockSteps the worker builds (hpcgpu.array.lazy_blocks), as bytes once sent (.packed)
    fused = lambda key, steps: fused_task(key, steps, _run_fused, PackedSteps, pushdown, backends)  # noqa: E731
    placed = holders(list(computed)) if computed else {}  # blocks' workers: packs per worker, a tree per block
    trees = exclusive_trees(dsk, keys, reads_per_key(dsk) if placed else width, shared)
    for key, order in trees:
        if len(order) == 1:
            continue  # a key that reads blocks computed before: regrouped, or left as it is
        for k in order:
            out.pop(k, None)  # a shared block may be in several trees
        out[key] = fused(key, tuple(dsk[k] for k in order))
    if computed:  # trees over persisted blocks: tasks of about width blocks, one final combine
        out = regroup(out, dsk, trees, keys, width, fused, placed)
    if shared:  # a shared block that a key outside the trees still reads stays
        read = {d for node in out.values() if getattr(node, "func", None) is not _run_fused for d in node.dependencies}
        out.update((k, dsk[k]) for k in shared & read if k not in out)
    return out


def _regenerable(dsk: Mapping) -> set:
    """The blocks that a fused tree may make again rather than share: those of block-local
    layers of pure functions that read nothing the graph makes: made from their index alone
    (a generator, ``ones``, with elementwise steps fused in), or, where several read them,
    from blocks computed before (``x + 1`` of a persisted ``x`` in ``y + y.T``)."""
    readers, pure = Counter(chain.from_iterable(node.dependencies for node in dsk.values())), {}
    for node in dsk.values():
        if isinstance(node, BlockStep) and id(node.layer) not in pure:
            pure[id(node.layer)] = pure_layer(node.layer)
    return {k for k, v in dsk.items() if isinstance(v, BlockStep) and pure[id(v.layer)]
            and not any(d in dsk for d in v.dependencies) and (not v.dependencies or readers[k] > 1)}


def _without_dask_order(task: Task, plans: dict) -> Task:
    """A blockwise-fused task that runs its inner steps in an order fixed here.

    Blockwise fusion makes one inner graph per layer, shared by all its blocks, and
    Dask orders it with ``dask.order`` each time a block runs: once per layer here.
    """
    if getattr(task, "func", None) is not _execute_subgraph:
        return task  # a DataNode (a block given in memory, e.g. by from_array) or a plain task
    inner, outkey, inkeys, *dependencies = task.args
    inner = getattr(inner, "value", inner)
    if id(inner) not in plans:
        order = toposort(inner, dependencies={k: set(v.dependencies) & inner.keys() for k, v in inner.items()})
        plans[id(inner)] = (tuple(inner[k] for k in order), outkey, tuple(inkeys))
    return Task(task.key, _run_subgraph, DataNode(None, plans[id(inner)]), *dependencies)


def optimize(dsk, keys, settings: Settings | None = None, **kwargs):
    """``dask.array``'s optimization with :func:`fuse_generated_trees` before linear fusion.

    The same steps as :func:`dask.array.optimization.optimize` (blockwise fusion, root
    fusion, culling, linear fusion, slice fusion), with the tree fusion first among the
    low-level ones: it takes each block's chain whole, so the chains need not be fused
    linearly first (a linearly fused chain runs through ``dask.order`` on every call,
    about 0.2 ms per block). hpcgpu.array installs it as dask's ``array_optimize`` when it
    makes its first array (:func:`mark`), but it is scoped: a graph that holds no array
    made by hpcgpu.array gets :func:`dask.array.optimization.optimize` itself, so a user's other Dask arrays run
    exactly as without hpcgpu (``hpcgpu.array.scope: all`` applies the passes to every
    array). The width comes from the dask config key ``hpcgpu.array.fuse-width``: ``auto``
    (default, :func:`auto_width` of the cluster's threads), a number of leaves, or 0 (the
    pass off); and ``hpcgpu.array.slice-pushdown`` (default True) moves slices before
    elementwise operations inside the fused chains. ``settings`` (default:
    this process's, :meth:`Settings.current`) replace these keys where the graph came from
    another process (:class:`ArrayOptimizer`).
    """
    settings = settings or Settings.current()
    off = settings.width != "auto" and int(settings.width) < 2
    if off or settings.fuse_active is False or not holds_hpcgpu_array(dsk, settings.scope):
        return dask_array_optimize(dsk, keys, **kwargs)
    with gc_paused():
        return _optimize(dsk, list(dask.core.flatten(keys)), settings)


def auto_width(leaves: int, threads: int, per_thread: int = TASKS_PER_THREAD) -> int:
    """Leaves per fused task for ``leaves`` blocks on ``threads`` worker threads: about
    ``per_thread`` tasks per thread (``hpcgpu.array.tasks-per-thread``, default
    :data:`TASKS_PER_THREAD`), at least :data:`DEFAULT_WIDTH` leaves each.

    Examples
    --------
    >>> auto_width(2500, 1), auto_width(2500, 2), auto_width(2500, 4), auto_width(2500, 64)
    (312, 156, 78, 16)
    >>> auto_width(2500, 4, per_thread=16)
    39
    """
    return max(DEFAULT_WIDTH, leaves // max(1, per_thread * threads))


def _optimize(dsk, keys: list, settings: Settings):
    if not isinstance(dsk, HighLevelGraph):
        dsk = HighLevelGraph.from_collections(id(dsk), dsk, dependencies=())
    dsk = route(dsk, lambda kind: wanted(kind, settings.collective, settings.workers), keys)
    dsk, found = culled(fuse_roots(optimize_blockwise(dsk, keys=keys), keys=keys), keys)
    graph, least, width = lazy_graph(dsk, found), None, settings.width
    if width == "auto":  # as many leaves per task as keeps every thread busy
        width = auto_width(leaf_count(graph, computed_inputs(graph)), settings.threads, settings.tasks_per_thread)
        least = min(DEFAULT_WIDTH ** 2, SMALL_GRAPH_TASKS * DEFAULT_WIDTH * max(1, settings.threads))
    graph = materialize_remaining(fuse_generated_trees(graph, keys, int(width), settings.pushdown, least,
                                                       fused_backends(settings.fused_kernels)))
    return _optimize_slices(fuse_linear_task_spec(graph, keys=keys))
