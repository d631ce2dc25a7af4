"""NumPy functions on lazy blocks: reductions, ``where``, ``astype``, slicing.

What a fused chain calls besides operators and ufuncs. Functions not listed here run on
the forced blocks (the call NumPy's dispatch would make), so they stay correct and only
lose the fusion.
"""

from __future__ import annotations

import numbers

import numpy as np
from dask.array.backends import numel_lookup

from hpcgpu.array.fused.expr import _REDUCTIONS, LazyBlock, Map, Reduce, Slice, Unsupported, force_all

__all__ = ["array_function", "astype", "getitem", "reduce"]


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
    from hpcgpu.array.fused.codegen import check_loop

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
    from hpcgpu.array.fused.codegen import check_reduction

    check_reduction(_REDUCTIONS[func], meta.dtype)
    return LazyBlock(Reduce(func, _REDUCTIONS[func], block._operand(block), axes, meta.dtype, True, extra), block.backend)


def _where(block: LazyBlock, condition, x, y) -> LazyBlock:
    nodes = [block._operand(v) for v in (condition, x, y)]
    metas = [np.zeros((), n.dtype) if hasattr(n, "dtype") and not isinstance(n, np.generic) else n for n in nodes]
    out = np.where(*metas).dtype
    from hpcgpu.array.fused.codegen import check_loop

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
