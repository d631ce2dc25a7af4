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

from dask._task_spec import DataNode, GraphNode, TaskRef, convert_legacy_graph, parse_input
from dask.blockwise import Blockwise, blockwise_token
from dask.highlevelgraph import HighLevelGraph

__all__ = ["BlockStep", "build_blocks", "lazy_graph", "materialize_remaining"]


class BlockStep:
    """Block ``key`` (``(layer name, *coords)``) of the block-local Blockwise ``layer``.

    Pickled with its layer: the blocks of one fused task share the layer object, which
    pickle writes once.
    """

    __slots__ = ("layer", "coords", "key", "dependencies")

    def __init__(self, layer: Blockwise, key: tuple, inputs: tuple):
        self.layer, self.key, self.coords = layer, key, key[1:]
        self.dependencies = tuple(dict.fromkeys([(name,) + self.coords for name in inputs]))  # x + x: x once

    def __reduce__(self):
        return BlockStep, (self.layer, self.key, tuple(k[0] for k in self.dependencies))


def build_blocks(steps) -> dict:
    """``{key: task}`` for ``steps``, each layer's constants substituted once."""
    by_layer: dict = {}
    for step in steps:
        by_layer.setdefault(id(step.layer), (step.layer, []))[1].append(step.coords)
    built: dict = {}
    for layer, coords in by_layer.values():
        built.update(_block_local_tasks(layer, coords))
    return built


def _block_local_tasks(layer: Blockwise, blocks: list) -> dict:
    """What ``dask.blockwise._make_blockwise_graph`` makes for ``blocks`` of a block-local
    layer (:func:`_block_local_inputs`), with one substitution per block instead of one per
    argument: an input's block has the output block's coordinates, so no index mapping."""
    task, consts, per_block = layer.task, {}, []
    for i, (arg, index) in enumerate(layer.indices):
        token = blockwise_token(i)
        if token not in task.dependencies:
            continue
        if index is None:
            consts[token] = arg if isinstance(arg, (GraphNode, TaskRef)) else DataNode(None, arg)
        else:
            per_block.append((token, arg, layer.io_deps.get(arg)))
    task = task.substitute(consts) if consts else task
    built = {}
    for coords in blocks:
        subs = {}
        for token, arg, io_dep in per_block:
            if io_dep is None:
                subs[token] = (arg, *coords)
            else:  # made from the block index (e.g. block_id)
                value = parse_input(io_dep.get(coords, coords))
                subs[token] = value if isinstance(value, GraphNode) else DataNode(None, value)
        key = (layer.output, *coords)
        built[key] = task.substitute(subs, key=key)
    return built


def _block_local_inputs(layer) -> tuple | None:
    """The array inputs of ``layer`` if each is indexed and blocked like its output."""
    if not isinstance(layer, Blockwise) or layer.new_axes:
        return None
    out_blocks = tuple(layer.dims[i] for i in layer.output_indices)
    inputs = []
    for name, index in layer.indices:
        if index is None:
            continue  # a constant
        if index != layer.output_indices:
            return None
        if name in layer.io_deps:
            continue  # made from the block index (e.g. block_id), not another layer
        if tuple(layer.numblocks[name]) != out_blocks:
            return None  # broadcast along an axis
        inputs.append(name)
    return tuple(inputs)


def lazy_graph(hlg: HighLevelGraph) -> dict:
    """``{key: Task or BlockStep}``: block-local Blockwise layers as BlockSteps, the rest
    materialised and converted to tasks; layer by layer in dependency order, so that the
    dict itself lists every key after the keys it depends on (almost always: a layer's
    keys may depend on each other)."""
    layers = [(name, hlg.layers[name], _block_local_inputs(hlg.layers[name])) for name in hlg._toposort_layers()]
    all_keys: set = set()
    for _, layer, _ in layers:
        all_keys.update(layer.get_output_keys())
    graph: dict = {}
    for _, layer, inputs in layers:
        if inputs is None:
            graph.update(convert_legacy_graph(dict(layer), all_keys))
        else:
            graph.update((key, BlockStep(layer, key, inputs)) for key in layer.get_output_keys())
    return graph


def materialize_remaining(graph: dict) -> dict:
    """``graph`` with every BlockStep replaced by its task (a layer at once when most of
    its blocks are left: Dask builds a whole layer faster than block by block)."""
    left: dict = {}
    for key, node in graph.items():
        if isinstance(node, BlockStep):
            left.setdefault(id(node.layer), (node.layer, []))[1].append(key)
    out = dict(graph)
    for layer, keys in left.values():
        if len(keys) * 2 > len(layer.get_output_keys()):
            out.update((key, layer[key]) for key in keys)
        else:
            out.update(build_blocks([graph[key] for key in keys]))
    return out
