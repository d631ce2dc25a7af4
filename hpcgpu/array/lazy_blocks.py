"""Blocks of block-local Blockwise layers, made where they run rather than on the scheduler.

A Blockwise layer whose every input is indexed like its output (``x + 1``, a generator,
the first step of a reduction) maps block ``(i, j)`` to its inputs' blocks ``(i, j)``: its
dependencies are known without building its tasks. Dask builds all of them when the graph
is materialised (about 50 us each; 5,000 for the array-sum graph, most of the half second
the scheduler spends before the first task starts). :class:`BlockStep` stands for one such
block: the fusion pass groups them by their dependencies alone, and each fused task builds
its own blocks on the worker (:func:`build_blocks`), in parallel and overlapped
with GPU work. Blocks left outside the fused tasks are built on the scheduler as before.
"""

from __future__ import annotations

from itertools import chain

from dask._task_spec import DataNode, GraphNode, TaskRef, convert_legacy_graph, parse_input
from dask.blockwise import Blockwise, blockwise_token
from dask.tokenize import tokenize
from dask.core import flatten, keys_in_tasks
from dask.highlevelgraph import HighLevelGraph

__all__ = ["BlockStep", "LegacyStep", "build_blocks", "culled", "io_dep_axes", "lazy_graph", "materialize_remaining",
           "permuted"]


class BlockStep:
    """Block ``key`` (``(layer name, *coords)``) of the block-local Blockwise ``layer``,
    whose ``inputs`` are ``(name, axes)`` pairs: block ``coords`` reads block
    ``[coords[a] for a in axes]`` of input ``name`` (``axes`` None: ``coords`` itself).

    Pickled with its layer: the blocks of one fused task share the layer object (and
    the ``inputs`` tuple), which pickle writes once.
    """

    __slots__ = ("layer", "coords", "key", "inputs", "dependencies")

    def __init__(self, layer: Blockwise, key: tuple, inputs: tuple):
        self.layer, self.key, self.coords, self.inputs = layer, key, key[1:], inputs
        if not inputs:  # a generated block (thousands per graph: the common cases first)
            self.dependencies = ()
        elif len(inputs) == 1 and inputs[0][1] is None:
            self.dependencies = ((inputs[0][0], *self.coords),)
        else:
            self.dependencies = tuple(dict.fromkeys([(name, *permuted(self.coords, axes))
                                                     for name, axes in inputs]))  # x + x: x once

    def __reduce__(self):
        return BlockStep, (self.layer, self.key, self.inputs)


def permuted(coords: tuple, axes: tuple | None) -> tuple:
    """The block index that block ``coords`` reads from an input at ``axes``
    (:func:`io_dep_axes`; None: ``coords`` itself).

    >>> permuted((2, 5), (1, 0)), permuted((2, 5), None)
    ((5, 2), (2, 5))
    """
    return coords if axes is None else tuple(coords[a] for a in axes)


def build_blocks(steps, prepare=None) -> dict:
    """``{key: task}`` for ``steps``, each layer's constants substituted once, and its task
    passed once through ``prepare`` (a function of a task) before its blocks are made."""
    by_layer: dict = {}
    for step in steps:
        by_layer.setdefault(id(step.layer), (step.layer, []))[1].append(step.coords)
    built: dict = {}
    for layer, coords in by_layer.values():
        built.update(_block_local_tasks(layer, coords, prepare))
    return built


def _block_local_tasks(layer: Blockwise, blocks: list, prepare=None) -> dict:
    """What ``dask.blockwise._make_blockwise_graph`` makes for ``blocks`` of a block-local
    layer (:func:`_block_local_inputs`), with one substitution per block instead of one per
    argument: an input's block has the output block's coordinates (or a permutation of
    them), so no index mapping."""
    task, consts, per_block = layer.task if prepare is None else prepare(layer.task), {}, []
    for i, (arg, index) in enumerate(layer.indices):
        token = blockwise_token(i)
        if token not in task.dependencies:
            continue
        if index is None:
            consts[token] = arg if isinstance(arg, (GraphNode, TaskRef)) else DataNode(None, arg)
        else:
            per_block.append((token, arg, layer.io_deps.get(arg), _axes(tuple(index), tuple(layer.output_indices))))
    task = task.substitute(consts) if consts else task
    built = {}
    for coords in blocks:
        subs = {}
        for token, arg, io_dep, axes in per_block:
            if io_dep is None:
                subs[token] = (arg, *permuted(coords, axes))
            else:  # made from the block index (e.g. block_id)
                at = permuted(coords, axes)
                value = parse_input(io_dep.get(at, at))
                subs[token] = value if isinstance(value, GraphNode) else DataNode(None, value)
        key = (layer.output, *coords)
        built[key] = task.substitute(subs, key=key)
    return built


def io_dep_axes(layer: Blockwise, name: str) -> tuple | None:
    """Block ``coords`` of a block-local ``layer`` gives its io_dep ``name`` the block index
    ``[coords[a] for a in axes]`` (``normal(...).T``); None: ``coords`` itself."""
    index = next(i for arg, i in layer.indices if isinstance(arg, str) and arg == name)
    return _axes(tuple(index), tuple(layer.output_indices))


def _axes(index: tuple, output: tuple) -> tuple | None:
    """Where each axis of an input indexed ``index`` is in the output (None: in place)."""
    return None if index == output else tuple(output.index(i) for i in index)


def _block_local_inputs(layer) -> tuple | None:
    """``((name, axes), ...)`` for the array inputs of ``layer`` if each is indexed like
    its output, or by a permutation of its indices (``x.T``), and blocked alike."""
    if not isinstance(layer, Blockwise) or layer.new_axes:
        return None
    output = tuple(layer.output_indices)
    inputs = []
    for name, index in layer.indices:
        if index is None:
            continue  # a constant
        if len(index) != len(output) or set(index) != set(output) or len(set(index)) != len(index):
            return None  # a contraction, a broadcast or a repeated index
        if name in layer.io_deps:
            continue  # made from the block index (e.g. block_id), not another layer
        if tuple(layer.numblocks[name]) != tuple(layer.dims[i] for i in index):
            return None  # broadcast along an axis
        inputs.append((name, _axes(tuple(index), output)))
    return tuple(inputs)


def lazy_graph(hlg: HighLevelGraph, found: dict | None = None) -> dict:
    """``{key: Task or BlockStep}``: block-local Blockwise layers as BlockSteps, the rest
    materialised and converted to tasks; layer by layer in dependency order, so that the
    dict itself lists every key after the keys it depends on (almost always: a layer's
    keys may depend on each other). ``found``: what :func:`culled` found (legacy tasks'
    dependencies, BlockSteps), not searched for or made again."""
    layers = [(name, hlg.layers[name], _block_local_inputs(hlg.layers[name])) for name in hlg._toposort_layers()]
    outputs = [layer.get_output_keys() for _, layer, _ in layers]
    all_keys, found, graph = set().union(*outputs), found or {}, {}
    for (_, layer, inputs), keys in zip(layers, outputs):
        if inputs is None:
            graph.update(_legacy_steps(dict(layer), all_keys, found))
        else:
            graph.update((key, found.get(key) or BlockStep(layer, key, inputs)) for key in keys)
    return graph


def culled(hlg: HighLevelGraph, keys) -> tuple[HighLevelGraph, dict]:
    """``hlg.cull(keys)``, the same graph, and what the cull found for :func:`lazy_graph`:
    ``{key: its dependencies}`` for the keys of materialised layers (which
    :meth:`HighLevelGraph.cull` finds by walking each task, then drops), and
    ``{key: its BlockStep}`` for block-local layers needed whole (their dependencies
    follow from the block index, no per-block map of Dask's). The steps are Dask's own:
    layer by layer from the outputs, each other layer's ``cull``."""
    needed = set(flatten(keys))
    legacy = any(layer.has_legacy_tasks for layer in hlg.layers.values())
    all_ext_keys = hlg.get_all_external_keys() if legacy else set()
    layers, dependencies, found = {}, {}, {}
    tok = tokenize(needed)
    for name in reversed(hlg._toposort_layers()):
        layer = hlg.layers[name]
        if needed:  # Dask keeps every layer whole once no key is needed (as hlg.cull does)
            steps = _whole_block_steps(layer, needed)
            if steps is not None:
                needed.difference_update(steps)
                needed.update(chain.from_iterable(step.dependencies for step in steps.values()))
                found.update(steps)
            else:
                layer, deps = layer.cull(needed, all_ext_keys)
                if not deps:
                    continue
                for k, d in deps.items():
                    needed |= d
                    needed.discard(k)
                if not isinstance(layer, Blockwise):
                    found.update(deps)
        layers[f"{name}-{tok}"] = layer
        dependencies[f"{name}-{tok}"] = hlg.dependencies[name]
    kept = set(layers)
    return HighLevelGraph(layers, {name: dependencies[name] & kept for name in layers}), found


def _whole_block_steps(layer, needed: set) -> dict | None:
    """``{key: BlockStep}`` for every block of ``layer`` if it is block-local, not culled
    before, every block is needed, and a block's dependencies are its inputs' blocks alone
    (no task given as a constant, no io_dep that names keys); None otherwise."""
    inputs = _block_local_inputs(layer)
    if inputs is None or layer.output_blocks or any(isinstance(arg, TaskRef) for arg, _ in layer.indices) \
            or any(getattr(dep, "produces_keys", False) for dep in layer.io_deps.values()):
        return None
    out = layer.get_output_keys()
    if not needed.issuperset(out):
        return None
    return {key: BlockStep(layer, key, inputs) for key in out}


class LegacyStep:
    """A task in Dask's legacy tuple form (a reduction tree's node), converted to a
    :class:`~dask._task_spec.Task` where it runs: the fusion pass needs only its
    dependencies, and most such nodes end inside a fused task."""

    __slots__ = ("key", "task", "dependencies")

    def __init__(self, key, task, dependencies):
        self.key, self.task, self.dependencies = key, task, frozenset(dependencies)

    def build(self) -> GraphNode:
        """The node Dask's ``convert_legacy_graph`` makes of it."""
        (node,) = convert_legacy_graph({self.key: self.task}, self.dependencies | {self.key}).values()
        return node

    def __reduce__(self):
        return LegacyStep, (self.key, self.task, self.dependencies)


def _legacy_steps(layer: dict, all_keys: set, found: dict) -> dict:
    """``layer`` with its legacy tuples as LegacySteps, its other nodes converted.
    ``found``: dependencies known already (:func:`culled`; searched for in ``all_keys``)."""
    out, rest = {}, {}
    for key, task in layer.items():
        if type(task) is tuple and task and callable(task[0]):
            deps = found.get(key)
            out[key] = LegacyStep(key, task, keys_in_tasks(all_keys, [task]) if deps is None else deps & all_keys)
        else:
            rest[key] = task
    out.update(convert_legacy_graph(rest, all_keys))
    return out


def materialize_remaining(graph: dict) -> dict:
    """``graph`` with every BlockStep replaced by its task (a layer at once when most of
    its blocks are left: Dask builds a whole layer faster than block by block)."""
    left: dict = {}
    out = dict(graph)
    for key, node in graph.items():
        if isinstance(node, BlockStep):
            left.setdefault(id(node.layer), (node.layer, []))[1].append(key)
        elif isinstance(node, LegacyStep):
            out[key] = node.build()
    for layer, keys in left.values():
        if len(keys) * 2 > len(layer.get_output_keys()):
            out.update((key, layer[key]) for key in keys)
        else:
            out.update(build_blocks([graph[key] for key in keys]))
    return out
