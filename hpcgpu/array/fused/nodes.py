"""The nodes of a fused expression: leaves (random or in-memory blocks), elementwise maps,
slices and reductions, as values that the evaluators read.

:mod:`hpcgpu.array.fused.expr` builds them through :class:`~hpcgpu.array.fused.expr.LazyBlock`;
the evaluators (:mod:`~hpcgpu.array.fused.replay` for NumPy, :mod:`~hpcgpu.array.fused.cuda`
with :mod:`~hpcgpu.array.fused.codegen` for CuPy) read them and never import the lazy block.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Unsupported", "Node", "RandomLeaf", "ArrayLeaf", "Map", "Slice", "Reduce", "leaves_of", "with_keys"]


class Unsupported(TypeError):
    """An operation the fused expressions do not record; the step runs on real blocks."""


class Node:
    __slots__ = ("shape", "dtype")


class RandomLeaf(Node):
    """A block of :mod:`hpcgpu.array.random` (its arguments, as :func:`hpcgpu.array.seeds.draw_block` takes them)."""

    __slots__ = ("backend", "seed", "method", "args", "key", "block_id")

    def __init__(self, backend, seed, method, args, dtype, shape, key, block_id):
        self.backend, self.seed, self.method, self.args = backend, seed, method, args
        self.dtype, self.shape, self.key, self.block_id = np.dtype(dtype), tuple(shape), key, tuple(block_id)


class ArrayLeaf(Node):
    """A block already in memory."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value, self.shape, self.dtype = value, tuple(value.shape), np.dtype(value.dtype)


class Map(Node):
    """An elementwise step: ``fn(*args)``, ``args`` nodes or scalars, computed in ``loop``
    dtypes (the inputs', then the output's) as the ufunc ``name``."""

    __slots__ = ("fn", "name", "args", "loop")

    def __init__(self, fn, name, args, loop, shape):
        self.fn, self.name, self.args, self.loop = fn, name, tuple(args), tuple(np.dtype(d) for d in loop)
        self.shape, self.dtype = tuple(shape), self.loop[-1]


class Slice(Node):
    """``child[index]``, ``index`` a tuple of one slice per dimension, ``ranges`` the
    indices each takes (``slice(3, None, -1).indices(n)`` cannot be applied again)."""

    __slots__ = ("child", "index", "ranges")

    def __init__(self, child, index):
        self.child, self.index, self.dtype = child, index, child.dtype
        self.ranges = tuple(range(*s.indices(n)) for s, n in zip(index, child.shape))
        self.shape = tuple(len(r) for r in self.ranges)


class Reduce(Node):
    """``fn(child, axis=axis, dtype=..., keepdims=keepdims)`` as the reduction ``name``."""

    __slots__ = ("fn", "name", "child", "axis", "keepdims", "kwargs")

    def __init__(self, fn, name, child, axis, dtype, keepdims, kwargs):
        self.fn, self.name, self.child, self.axis, self.keepdims = fn, name, child, axis, keepdims
        self.kwargs, self.dtype = kwargs, np.dtype(dtype)
        self.shape = tuple(1 if d in axis else n for d, n in enumerate(child.shape) if keepdims or d not in axis)


_REDUCTIONS = {np.sum: "sum", np.prod: "prod", np.min: "min", np.max: "max", np.amin: "min", np.amax: "max"}


def leaves_of(node: Node, found: dict | None = None) -> list:
    """The leaves of ``node`` (each once), in the order the expression first reaches them.

    Examples
    --------
    >>> x = ArrayLeaf(np.ones((2, 2)))
    >>> square = Map(np.multiply, "multiply", (x, x), ("float64", "float64", "float64"), (2, 2))
    >>> [type(leaf).__name__ for leaf in leaves_of(Slice(square, (slice(None, None, 2), slice(None))))]
    ['ArrayLeaf']
    """
    found = {} if found is None else found
    if isinstance(node, (RandomLeaf, ArrayLeaf)):
        found.setdefault(id(node), node)
    elif isinstance(node, Map):
        for arg in node.args:
            if isinstance(arg, Node):
                leaves_of(arg, found)
    else:
        leaves_of(node.child, found)
    return list(found.values())


def with_keys(node: Node, keys: dict, memo: dict | None = None) -> Node:
    """``node`` with each random leaf ``id(leaf)`` in ``keys`` drawn from the block
    ``keys[id(leaf)] = (key, block_id)`` instead (the rest of the expression shared).

    Examples
    --------
    >>> leaf = RandomLeaf("numpy", 0, "uniform", (0.0, 1.0), "float64", (2, 2), 7, (0, 0))
    >>> moved = with_keys(Reduce(np.sum, "sum", leaf, (0, 1), "float64", True, {}), {id(leaf): (9, (1, 0))})
    >>> moved.child.key, moved.child.block_id, moved.child.shape
    (9, (1, 0), (2, 2))
    """
    memo = {} if memo is None else memo
    if id(node) in memo:
        return memo[id(node)]
    if isinstance(node, RandomLeaf):
        key, block_id = keys.get(id(node), (node.key, node.block_id))
        new = RandomLeaf(node.backend, node.seed, node.method, node.args, node.dtype, node.shape, key, block_id)
    elif isinstance(node, ArrayLeaf):
        new = node
    elif isinstance(node, Map):
        args = [with_keys(a, keys, memo) if isinstance(a, Node) else a for a in node.args]
        new = Map(node.fn, node.name, args, node.loop, node.shape)
    elif isinstance(node, Slice):
        new = Slice(with_keys(node.child, keys, memo), node.index)
    else:
        new = Reduce(node.fn, node.name, with_keys(node.child, keys, memo), node.axis, node.dtype, node.keepdims,
                     node.kwargs)
    memo[id(node)] = new
    return new
