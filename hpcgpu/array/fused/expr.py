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
from dask.array.backends import numel_lookup

from hpcgpu.array.fused.ops import check_loop, check_reduction
from hpcgpu.array.fused.nodes import (ArrayLeaf, Map, Node, RandomLeaf, Reduce, Slice, Unsupported, leaves_of,
                                      with_keys)

__all__ = ["Unsupported", "LazyBlock", "RandomLeaf", "ArrayLeaf", "Map", "Slice", "Reduce", "force_all", "leaves_of",
           "with_keys", "array_function", "astype", "getitem", "reduce"]


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
        return array_function(self, func, args, kwargs)

    def astype(self, dtype, casting="unsafe", copy=True, **kwargs):
        return astype(self, dtype, casting, kwargs)

    def __getitem__(self, index):
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


def force_all(value):
    """``value`` with every LazyBlock in it (inside tuples, lists, dicts) computed."""
    if isinstance(value, LazyBlock):
        return value.force()
    if isinstance(value, (tuple, list)):
        return type(value)(force_all(v) for v in value)
    if isinstance(value, dict):
        return {k: force_all(v) for k, v in value.items()}
    return value


# NumPy functions on lazy blocks: reductions, ``where``, ``astype``, slicing. Functions not
# listed here run on the forced blocks (the call NumPy's dispatch would make).

@numel_lookup.register(LazyBlock)
def _numel(x: LazyBlock, **kwargs):
    """Dask's element count (``mean``, ``var``) of a lazy block: its backend's, from the shape."""
    return numel_lookup.dispatch(type(__import__(x.backend).empty(0)))(x, **kwargs)


class _AsType:
    """``x.astype(dtype)``, kept as a callable for the NumPy replay."""

    __slots__ = ("dtype",)

    def __init__(self, dtype):
        self.dtype = dtype

    def __call__(self, x):
        return x.astype(self.dtype)


def astype(block: LazyBlock, dtype, casting, kwargs) -> LazyBlock:
    dtype = np.dtype(dtype)
    if kwargs or not np.can_cast(block.dtype, dtype, casting=casting):
        raise Unsupported(f"astype({dtype}, casting={casting!r}, {sorted(kwargs)})")
    check_loop("astype", (block.dtype, dtype))
    return LazyBlock(Map(_AsType(dtype), "astype", (block._operand(block),), (block.dtype, dtype), block.shape), block.backend)


def getitem(block: LazyBlock, index) -> LazyBlock:
    """``block[index]`` for slices and ``...`` (other indices: Unsupported)."""
    index = index if isinstance(index, tuple) else (index,)
    if index.count(Ellipsis) > 1 or not all(isinstance(i, slice) or i is Ellipsis for i in index):
        raise Unsupported(f"index {index!r}")
    if Ellipsis in index:
        at = index.index(Ellipsis)
        index = index[:at] + (slice(None),) * (block.ndim - len(index) + 1) + index[at + 1:]
    if len(index) > block.ndim:
        raise Unsupported(f"index {index!r} for {block.ndim} dimensions")
    index = index + (slice(None),) * (block.ndim - len(index))
    for s in index:
        for part in (s.start, s.stop, s.step):
            if part is not None and not isinstance(part, numbers.Integral):
                raise Unsupported(f"slice {s!r}")
    return LazyBlock(Slice(block._operand(block), index), block.backend)


def reduce(block: LazyBlock, func, axis=None, dtype=None, keepdims=False, **kwargs) -> LazyBlock:
    """``func(block, axis, dtype, keepdims)`` for sum, prod, min and max."""
    if kwargs or not keepdims or block.size == 0:
        raise Unsupported("reductions are fused with keepdims=True over a non-empty block")
    axes = tuple(range(block.ndim)) if axis is None else (axis,) if isinstance(axis, numbers.Integral) else axis
    axes = tuple(sorted({int(a) % block.ndim for a in axes}))
    extra = {} if dtype is None else {"dtype": dtype}
    try:
        meta = func(np.ones((1,) * block.ndim, block.dtype), axis=axes, keepdims=True, **extra)
    except (TypeError, ValueError) as error:
        raise Unsupported(str(error)) from None
    check_reduction(_REDUCTIONS[func], meta.dtype)
    return LazyBlock(Reduce(func, _REDUCTIONS[func], block._operand(block), axes, meta.dtype, True, extra), block.backend)


def _where(block: LazyBlock, condition, x, y) -> LazyBlock:
    nodes = [block._operand(v) for v in (condition, x, y)]
    metas = [np.zeros((), n.dtype) if hasattr(n, "dtype") and not isinstance(n, np.generic) else n for n in nodes]
    out = np.where(*metas).dtype
    cond_dtype = getattr(nodes[0], "dtype", np.dtype(bool))
    loop = (np.dtype(bool) if cond_dtype == bool else cond_dtype, out, out, out)
    check_loop("where", loop)
    shape = np.broadcast_shapes(*(n.shape for n in nodes if hasattr(n, "shape") and not isinstance(n, np.generic)))
    return LazyBlock(Map(np.where, "where", nodes, loop, shape), block.backend)


def array_function(block: LazyBlock, func, args, kwargs):
    """NumPy's ``__array_function__`` for a lazy block."""
    if func in _REDUCTIONS and len(args) == 1 and isinstance(args[0], LazyBlock):
        return reduce(args[0], func, **kwargs)
    if func is np.where and len(args) == 3 and not kwargs:
        return _where(block, *args)
    if func is np.full_like and kwargs.get("shape") is not None:  # dask's numel
        xp = __import__(block.backend)
        fill = args[1] if len(args) > 1 else kwargs["fill_value"]
        return xp.full(kwargs["shape"], fill, dtype=kwargs.get("dtype") or block.dtype)
    return func(*force_all(args), **force_all(kwargs))  # not fused: the call on real blocks
