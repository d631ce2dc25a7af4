"""The expression a fused chain builds: lazy blocks that record operations, not run them.

:class:`LazyBlock` stands for one block that has not been computed. NumPy's protocols
(``__array_ufunc__``, ``__array_function__``, the operators, ``astype``, ``__getitem__``)
record each operation on it as a node; the block is computed (:meth:`LazyBlock.force`)
only when something needs its values. Operations outside the supported set raise
:class:`Unsupported` (or a ``TypeError`` from NumPy's dispatch), and the caller runs that
step on forced values as before (:mod:`hpcgpu.array.fused.runner`).

Nodes keep the callable the chain used, so that the NumPy backend
(:func:`hpcgpu.array.fused.replay.evaluate`) replays the very same calls, and the ufunc
with the loop dtypes NumPy resolves, so that the CUDA backend
(:mod:`hpcgpu.array.fused.cuda`) generates the same arithmetic.
"""

from __future__ import annotations

import numbers
import operator

import numpy as np

__all__ = ["Unsupported", "LazyBlock", "RandomLeaf", "ArrayLeaf", "Map", "Slice", "Reduce", "force_all", "leaves_of",
           "with_keys"]


class Unsupported(TypeError):
    """An operation the fused expressions do not record; the step runs on real blocks."""


class Node:
    __slots__ = ("shape", "dtype")


class RandomLeaf(Node):
    """A block of :mod:`hpcgpu.array.random` (its arguments, as ``random._block`` takes them)."""

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
_OPERATORS = {  # dunder: (the callable the chain used, its ufunc, reflected)
    "add": (operator.add, np.add), "sub": (operator.sub, np.subtract), "mul": (operator.mul, np.multiply),
    "truediv": (operator.truediv, np.true_divide), "pow": (operator.pow, np.power),
    "gt": (operator.gt, np.greater), "ge": (operator.ge, np.greater_equal), "lt": (operator.lt, np.less),
    "le": (operator.le, np.less_equal), "eq": (operator.eq, np.equal), "ne": (operator.ne, np.not_equal),
    "and": (operator.and_, np.bitwise_and), "or": (operator.or_, np.bitwise_or),
}


def _scalar(value) -> bool:
    return isinstance(value, (numbers.Number, np.generic)) and not isinstance(value, np.ndarray)


def _dispatch_type(value):
    """What ``resolve_dtypes`` takes for an operand: a dtype, or the Python type of a weak scalar."""
    if isinstance(value, (Node, np.generic)):
        return value.dtype
    if isinstance(value, bool):
        return bool
    return int if isinstance(value, numbers.Integral) else float if isinstance(value, numbers.Real) else None


class LazyBlock:
    """One block of a fused chain, not computed yet.

    Examples
    --------
    >>> import numpy as np
    >>> x = LazyBlock(ArrayLeaf(np.arange(6.0).reshape(2, 3)), "numpy")
    >>> y = np.sum((x * 2 + 1)[:, ::2], axis=(0, 1), keepdims=True)
    >>> type(y.node).__name__, y.shape, y.force().tolist()
    ('Reduce', (1, 1), [[24.0]])
    """

    __array_priority__ = 1000
    __slots__ = ("node", "backend", "_value")

    def __init__(self, node: Node, backend: str):
        self.node, self.backend, self._value = node, backend, None

    shape = property(lambda self: self.node.shape)
    dtype = property(lambda self: self.node.dtype)
    ndim = property(lambda self: len(self.node.shape))
    size = property(lambda self: int(np.prod(self.node.shape, dtype=np.int64)))

    def __len__(self):
        return self.node.shape[0]

    def __repr__(self):
        return f"LazyBlock({type(self.node).__name__}, shape={self.shape}, dtype={self.dtype})"

    def force(self):
        """The block's values (computed once, by the backend's evaluator)."""
        if self._value is None:
            if self.backend == "cupy":
                from hpcgpu.array.fused.cuda import evaluate
            else:
                from hpcgpu.array.fused.replay import evaluate
            self._value = evaluate(self.node)
        return self._value

    def __array__(self, *args, **kwargs):
        raise Unsupported("a fused block does not convert to a NumPy array")

    def __bool__(self):
        raise Unsupported("a fused block has no truth value")

    def __iter__(self):
        raise Unsupported("a fused block is not iterable")

    def _operand(self, value):
        if isinstance(value, LazyBlock):
            if value.backend != self.backend:
                raise Unsupported("blocks of two backends")
            if isinstance(value.node, Reduce):  # a reduction feeds elementwise work: compute it
                return ArrayLeaf(value.force())
            return value.node
        if _scalar(value):
            return value
        if type(value).__module__.split(".")[0] == ("cupy" if self.backend == "cupy" else "numpy") \
                and hasattr(value, "shape"):
            return ArrayLeaf(value)
        raise Unsupported(f"operand of type {type(value).__name__}")

    def map(self, fn, ufunc, args) -> LazyBlock:
        """The lazy ``fn(*args)`` computed as ``ufunc`` (Unsupported for what NumPy would refuse)."""
        from hpcgpu.array.fused.codegen import check_loop

        nodes = [self._operand(a) for a in args]
        try:
            loop = ufunc.resolve_dtypes(tuple(_dispatch_type(a) for a in nodes) + (None,) * ufunc.nout)
            for value, dtype in zip(nodes, loop):
                if not isinstance(value, Node) and not isinstance(value, np.generic):
                    dtype.type(value)  # a Python int out of the loop's range: NumPy raises
            shape = np.broadcast_shapes(*(a.shape for a in nodes if isinstance(a, Node)))
        except (TypeError, ValueError, OverflowError) as error:
            raise Unsupported(str(error)) from None
        if ufunc.nout != 1:
            raise Unsupported(f"{ufunc.__name__} has {ufunc.nout} outputs")
        check_loop(ufunc.__name__, loop)
        return LazyBlock(Map(fn, ufunc.__name__, nodes, loop, shape), self.backend)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if method != "__call__" or kwargs:
            raise Unsupported(f"{ufunc.__name__}.{method} with {sorted(kwargs)}")
        return self.map(ufunc, ufunc, inputs)

    def __array_function__(self, func, types, args, kwargs):
        from hpcgpu.array.fused.functions import array_function  # registers Dask's numel too

        return array_function(self, func, args, kwargs)

    def astype(self, dtype, casting="unsafe", copy=True, **kwargs):
        from hpcgpu.array.fused.functions import astype

        return astype(self, dtype, casting, kwargs)

    def __getitem__(self, index):
        from hpcgpu.array.fused.functions import getitem

        return getitem(self, index)

    def __neg__(self):
        return self.map(operator.neg, np.negative, (self,))

    def __abs__(self):
        return self.map(operator.abs, np.absolute, (self,))

    def __invert__(self):
        return self.map(operator.invert, np.invert, (self,))


def _binary(name: str, fn, ufunc):
    def forward(self, other):
        return self.map(fn, ufunc, (self, other))

    def reflected(self, other):
        return self.map(fn, ufunc, (other, self))

    return forward, reflected


for _name, (_fn, _ufunc) in _OPERATORS.items():
    _forward, _reflected = _binary(_name, _fn, _ufunc)
    setattr(LazyBlock, f"__{_name}__", _forward)
    if _name not in ("gt", "ge", "lt", "le", "eq", "ne"):
        setattr(LazyBlock, f"__r{_name}__", _reflected)
LazyBlock.__hash__ = None


def leaves_of(node: Node, found: dict | None = None) -> list:
    """The leaves of ``node`` (each once), in the order the expression first reaches them.

    Examples
    --------
    >>> x = LazyBlock(ArrayLeaf(np.ones((2, 2))), "numpy")
    >>> [type(leaf).__name__ for leaf in leaves_of((x * x + 1)[::2].node)]
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


def force_all(value):
    """``value`` with every LazyBlock in it (inside tuples, lists, dicts) computed."""
    if isinstance(value, LazyBlock):
        return value.force()
    if isinstance(value, (tuple, list)):
        return type(value)(force_all(v) for v in value)
    if isinstance(value, dict):
        return {k: force_all(v) for k, v in value.items()}
    return value
