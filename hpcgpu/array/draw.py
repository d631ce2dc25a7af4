"""How one call of :mod:`hpcgpu.array.random` becomes a Dask array: its seed, backend and
dtype checked, one block-local layer whose blocks draw inside fused steps."""

from __future__ import annotations

import functools
import numbers
import threading

import numpy as np

import dask
import dask.array as da
from dask.array.core import normalize_chunks
from dask.blockwise import blockwise

from hpcgpu.array.fused.runner import lazy_random_block
from hpcgpu.array.optimization import mark
from hpcgpu.array.seeds import RandomBlocks, draw_block
from hpcgpu.system.backends import resolve_backend

__all__ = ["make", "check_dtype", "scalars", "dasks", "STATE", "STATE_LOCK"]

STATE = np.random.RandomState()  # seeds of calls without seed=; seed() sets it
STATE_LOCK = threading.Lock()



def _seed_of_call(seed):
    if seed is not None:
        return seed
    with STATE_LOCK:
        return int(STATE.randint(0, 2**63 - 1, dtype=np.int64))


def _backend_of_call(backend):
    # within hpcgpu.array, Dask's own switch to CuPy chunks also picks the GPU kernels
    if backend is None and dask.config.get("array.backend", "numpy") == "cupy":
        return "cupy"
    return backend


def scalars(*values) -> bool:
    """Whether every value is a real scalar (what hpcgpu's kernels take as parameters)."""
    return all(isinstance(v, numbers.Real) and not isinstance(v, bool) for v in values)


def check_dtype(method: str, dtype) -> np.dtype:
    dtype = np.dtype(dtype)
    wanted = ("i", "u") if method == "integers" else ("f",)
    if (dtype.kind not in wanted or dtype.itemsize > 8 or (dtype.kind == "f" and dtype.itemsize < 4)
            or not dtype.isnative):
        hint = "an integer dtype such as 'int64'" if method == "integers" else "'float64' or 'float32'"
        shown = dtype.name if dtype.isnative else dtype.str
        raise TypeError(f"{method}(dtype={shown!r}): use {hint}, in this machine's byte order")
    return dtype


def make(method, args, size, chunks, dtype, seed, backend) -> da.Array:
    dtype = check_dtype(method, dtype)
    backend = resolve_backend("array", _backend_of_call(backend))
    seed = _seed_of_call(seed)
    shape = (int(size),) if np.ndim(size) == 0 else tuple(int(n) for n in size)
    chunks = normalize_chunks(chunks, shape, dtype=dtype)
    xp = __import__(backend)
    # the constants travel inside one partial of a module-level function: Dask substitutes
    # each positional argument into every block's task, which costs far more than the
    # block's GPU work for a nested ``chunks`` tuple; one shared partial pickles once
    make = functools.partial(_make_block, backend, seed, method, args, dtype.str, chunks)
    name = f"{method}-{da.core.tokenize(method, args, shape, chunks, dtype, seed, backend)}"
    index = tuple(range(len(shape)))
    layer = blockwise(make, name, index, RandomBlocks(chunks), index, numblocks={})
    made = da.Array(layer, name, chunks, dtype=dtype, meta=xp.empty((0,) * len(shape), dtype))
    return mark(made) if isinstance(made, da.Array) else made  # array_plugins may return anything


def dasks(name, params, size, seed, backend) -> bool:
    """Whether a call goes to Dask's function of ``name``: no ``size`` (a 0-d draw) or
    array parameters, which hpcgpu's kernels do not take."""
    if size is not None and scalars(*params):
        return False
    if seed is not None or backend is not None:
        raise ValueError(f"{name}(seed=, backend=) need a size and scalar parameters; "
                         f"without seed= and backend= Dask's {name} draws this")
    return True


def _make_block(backend, seed, method, args, dtype, chunks, block_id=None):
    shape = tuple(c[i] for c, i in zip(chunks, block_id))
    lazy = lazy_random_block(backend, seed, method, args, dtype, shape, block_id)  # inside a fused step
    if lazy is not None:
        return lazy
    return draw_block(backend, seed, method, args, dtype, shape, block_id)
