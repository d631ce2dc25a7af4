"""Alike block chains of a fused task, recorded once and run as one kernel for all blocks.

A fused task (:mod:`hpcgpu.array.optimization`) runs one chain of steps per block (a
random block, ``+ 1``, a slice, the block's partial sum) and then the tree that combines
the partial results. Recording each block's chain on lazy blocks
(:mod:`hpcgpu.array.fused.runner`) and launching its kernel costs about 0.3 ms of Python
per block, more than a GPU needs for the block itself.

Two chains are *alike* when their steps are the same functions with the same constants,
wired the same way, and differ only in which block of an :mod:`hpcgpu.array.random` array
they start from, blocks of one shape (:func:`chain_print`). Alike chains record the same
expression up to the random leaves' keys, so this module records one of them (the
representative) and, when it ends in a fused reduction over random leaves alone, runs the
whole group as one kernel launch, each block's key an argument
(``evaluate_batch`` of the backend). Only Dask's, NumPy's, CuPy's and hpcgpu's own
functions count as alike: they are pure, so equal calls give equal values. Any other
chain (a user's ``map_blocks`` function, a block in memory, an unfused step) runs block by
block as before.
"""

from __future__ import annotations

import functools
import operator
from collections import Counter

import numpy as np
from dask._task_spec import DataNode, GraphNode, Task, TaskRef

from hpcgpu.array.fused.expr import LazyBlock
from hpcgpu.array.fused.nodes import RandomLeaf, Reduce, leaves_of
from hpcgpu.array.lazy_blocks import BlockStep, LegacyStep, io_dep_axes, permuted

__all__ = ["split_chains", "chain_print", "run_alike_chains", "NotAlike", "pure_layer"]

#: top-level modules whose functions are pure by their contract (equal calls, equal values)
_PURE = frozenset({"dask", "numpy", "operator", "_operator", "hpcgpu", "cupy", "cupyx", "math"})
#: builtins that are pure (not ``next``, ``print``, ``open``...), and builtin types
_PURE_BUILTINS = frozenset({getattr, len, abs, min, max, sum, round, divmod, pow, isinstance})


#: argument types whose values print as themselves (with their type: 1 and True differ)
_ATOMS = frozenset({int, bool, str, bytes, complex, type(None), type(Ellipsis)})


class NotAlike(Exception):
    """A chain that is alike only to itself (an unknown function, an unusual node)."""


def split_chains(steps) -> list[list]:
    """The chains among ``steps`` (a fused task's steps, each after its dependencies):
    runs that start at a step without dependencies, each next step using exactly the step
    before it, which no other step reads. Steps with several dependencies (the combining
    tree) belong to none.

    Examples
    --------
    >>> from types import SimpleNamespace as Step
    >>> a, b = Step(key="a", dependencies=()), Step(key="b", dependencies=("a",))
    >>> c, d = Step(key="c", dependencies=()), Step(key="d", dependencies=("b", "c"))
    >>> [[s.key for s in chain] for chain in split_chains([a, b, c, d])]
    [['a', 'b'], ['c']]
    """
    chains, current = [], None
    reads = Counter(key for step in steps for key in step.dependencies)
    for step in steps:
        deps = step.dependencies
        if not deps:
            current = [step]
            chains.append(current)
        elif current is not None and len(deps) == 1 and current[-1].key in deps and reads[current[-1].key] == 1:
            current.append(step)
        else:
            current = None
    return chains


def _function(func):
    """A hashable stand-in for ``func``, or NotAlike for a function not known to be pure."""
    if isinstance(func, np.ufunc) or isinstance(func, type(len)) and func in _PURE_BUILTINS:
        return func
    if isinstance(func, functools.partial):
        return ("partial", _function(func.func), _value(func.args, None), _value(func.keywords, None))
    if isinstance(func, (operator.itemgetter, operator.attrgetter, operator.methodcaller)):
        return ("operator", repr(func))
    if type(func).__name__ == "Compose" and hasattr(func, "funcs"):  # toolz's: pure if its parts are
        return ("compose", _function(func.first), tuple(_function(f) for f in func.funcs))
    module = (func.__module__ if isinstance(func, type) else getattr(func, "__module__", None)) or ""
    if isinstance(func, type) and module == "builtins" or module.split(".")[0] in _PURE:
        try:
            hash(func)
        except TypeError:
            return ("id", id(func))
        return func
    raise NotAlike(f"{func!r} of {module or 'unknown module'}")


def _value(value, refs: dict | None):
    """A hashable print of a task argument: equal prints, equal arguments. ``refs`` maps
    the keys of the chain's steps to their positions (None: a layer's own task, whose
    references are placeholders that every block fills alike)."""
    kind = type(value)
    if kind in _ATOMS:  # the common cases first: a print per argument of every block
        return (kind, value)
    if kind is tuple or kind is list:
        return (kind, tuple([_value(v, refs) for v in value]))
    if kind is slice:
        return (slice, _value(value.start, refs), _value(value.stop, refs), _value(value.step, refs))
    if isinstance(value, TaskRef):
        if refs is None:
            return ("key", value.key)
        if value.key not in refs:
            raise NotAlike(f"reads {value.key!r} from outside the chain")
        return ("ref", refs[value.key])
    if isinstance(value, Task):  # Dask's List/Tuple/Dict containers are Tasks too
        return ("task", _function(value.func), _value(value.args, refs), _value(value.kwargs, refs))
    if isinstance(value, DataNode):
        return ("data", _value(value.value, refs))
    if isinstance(value, GraphNode):
        raise NotAlike(f"{type(value).__name__} node")
    if value is None or value is Ellipsis or isinstance(value, (str, bytes)):
        return value
    if isinstance(value, (bool, int, complex)):
        return (type(value).__name__, value)
    if isinstance(value, np.generic):  # before float: np.float64 is one, but promotes unlike it
        return ("scalar", value.dtype.str, value.tobytes())
    if isinstance(value, float):
        return ("float", value.hex())  # tells -0.0 from 0.0
    if isinstance(value, np.dtype):
        return ("dtype", value)
    if isinstance(value, slice):
        return ("slice", _value(value.start, refs), _value(value.stop, refs), _value(value.step, refs))
    if isinstance(value, (tuple, list)):
        return (type(value).__name__, tuple(_value(v, refs) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((_value(k, refs), _value(v, refs)) for k, v in value.items()))
    if callable(value) and not hasattr(value, "__array__"):
        return ("function", _function(value))
    return ("id", id(value))  # any other object is alike only to itself


def _check_layer(layer) -> None:
    """NotAlike unless every function and constant of Blockwise ``layer`` is of the pure kinds."""
    for arg, index in layer.indices:
        if index is None:
            _value(arg, None)
    _value(layer.task, None)


def pure_layer(layer) -> bool:
    """Whether Blockwise ``layer`` calls only functions known to be pure (Dask's, NumPy's,
    CuPy's, hpcgpu's...): a block of it may be made twice, with the same value."""
    try:
        _check_layer(layer)
    except NotAlike:
        return False
    return True


def _layer_print(step: BlockStep, layers: dict):
    """What a block of ``step``'s layer depends on besides its coordinates (checked once
    per layer: its functions and constants)."""
    layer = step.layer
    if id(layer) not in layers:
        try:
            _check_layer(layer)
            layers[id(layer)] = None
        except NotAlike as error:
            layers[id(layer)] = error
    if layers[id(layer)] is not None:
        raise layers[id(layer)]
    from hpcgpu.array.seeds import RandomBlocks

    per_block = []
    for name, dep in layer.io_deps.items():
        axes = io_dep_axes(layer, name)
        if isinstance(dep, RandomBlocks):  # the block's key comes with its batch, as its coordinates
            if axes is not None:
                raise NotAlike("a random block of other coordinates (a transposed generator)")
            per_block.append(("random", dep.block_shape(step.coords)))
        else:
            at = permuted(step.coords, axes)
            per_block.append(_value(dep.get(at, at), None))
    return ("block", id(layer), tuple(per_block))


def chain_print(chain: list, layers: dict) -> tuple:
    """``(print, coordinates)`` of a chain: alike chains have equal prints. Every block
    step of the chain must be at the same coordinates (NotAlike otherwise).

    ``layers`` caches what is checked once per layer.
    """
    refs, parts, coords = {}, [], None
    for position, step in enumerate(chain):
        if isinstance(step, BlockStep):
            if coords is not None and step.coords != coords:
                raise NotAlike("block steps at different coordinates")
            coords = step.coords
            parts.append(_layer_print(step, layers))
        elif isinstance(step, (Task, LegacyStep)):
            parts.append(_value(step.build() if isinstance(step, LegacyStep) else step, refs))
        else:
            raise NotAlike(f"{type(step).__name__} step")
        refs[step.key] = position
    if coords is None:
        raise NotAlike("no block step")
    return tuple(parts), coords


def _batchable(value, coords: tuple, backends: frozenset):
    """The Reduce node of a recorded chain that can run as one batch, or None."""
    if not isinstance(value, LazyBlock) or value.backend not in backends or not isinstance(value.node, Reduce):
        return None
    leaves = leaves_of(value.node)
    if not all(isinstance(leaf, RandomLeaf) and leaf.block_id == coords for leaf in leaves):
        return None  # a block in memory, or a random block of another index
    return value.node


def _evaluate_batch(backend: str, node: Reduce, block_ids: list):
    if backend == "cupy":
        from hpcgpu.array.fused.cuda import evaluate_batch
    else:
        from hpcgpu.array.fused.replay import evaluate_batch
    return evaluate_batch(node, block_ids)


#: groups smaller than this run block by block
MIN_GROUP = 2


def run_alike_chains(steps, run_chain, backends: frozenset) -> tuple[dict, list]:
    """Run the groups of alike chains among ``steps``; ``(values, steps left)``.

    ``run_chain(chain)`` runs one chain on lazy blocks and returns its value: the
    representative's. ``values`` holds each batched chain's value under its last key;
    the steps left (the tree, chains alike to none, groups whose representative did not
    record a fused reduction) run as before, in their order.
    """
    chains = split_chains(steps)
    if not chains:
        return {}, list(steps)
    # the first chain runs first: if it records nothing (its blocks' library is not
    # fused, e.g. NumPy blocks under "auto"), neither will the others, and printing them
    # would be wasted
    recorded = {id(chains[0][0]): run_chain(chains[0])}
    values, done = {chains[0][-1].key: recorded[id(chains[0][0])]}, {id(step) for step in chains[0]}
    if not isinstance(values[chains[0][-1].key], LazyBlock):
        return values, [step for step in steps if id(step) not in done]
    groups: dict = {}
    layers: dict = {}
    for chain in chains:
        try:
            printed, coords = chain_print(chain, layers)
        except NotAlike:
            continue
        groups.setdefault(printed, []).append((chain, coords))
    for group in groups.values():
        (first, coords), *_ = group
        if id(first[0]) not in recorded:
            if len(group) < MIN_GROUP:
                continue
            recorded[id(first[0])] = run_chain(first)
        value = values[first[-1].key] = recorded[id(first[0])]
        done.update(id(step) for step in first)
        node = _batchable(value, coords, backends) if len(group) >= MIN_GROUP else None
        if node is None:  # recorded, but not one kernel: the others run block by block
            continue
        results = _evaluate_batch(value.backend, node, [c for _, c in group])
        for (chain, _), result in zip(group, results):
            values[chain[-1].key] = result
            done.update(id(step) for step in chain)
    return values, [step for step in steps if id(step) not in done]
