"""Random arrays whose values depend on the seed and the block, never on placement.

Each block draws from its own counter-based Philox generator, keyed from
``SeedSequence(seed, spawn_key=block index)``: the same seed and chunks give the same
array whichever worker computes which block, in whatever order. On a GPU the block is
made by one CUDA kernel that evaluates Philox4x32-10 at each element's counter
(:mod:`hpcgpu.array.philox`): no generator state, no set-up, nothing that waits for the
GPU, so a worker queues its blocks back to back. On the CPU the block is made by NumPy's
``Philox``. The two streams differ: a seed reproduces an array per backend.

The module is a superset of :mod:`dask.array.random`: these functions take Dask's
arguments too (``normal(loc, scale, size, chunks)``, ``random_sample``); without
``seed=`` they take one from this module's global state, which :func:`seed` sets (it
seeds Dask's too, for the distributions that are Dask's own here). ``RandomState``,
``Generator`` and ``default_rng`` are Dask's, drawing with these kernels when CuPy backs
them (:mod:`hpcgpu.array.rng`); every other name is Dask's own object.
"""

from __future__ import annotations

import numpy as np

import dask.array as da
import dask.array.random as _dask_random

from hpcgpu.array.draw import STATE, STATE_LOCK, check_dtype, make as _make
from hpcgpu.array.draw import _backend_of_call, dasks as _dasks  # noqa: F401 (tests use _backend_of_call)
from hpcgpu.array.rng import Generator, RandomState, default_rng
from hpcgpu.array.seeds import RandomBlocks, block_seed, block_seeds
from hpcgpu.system.reexport import fallback

__all__ = ["normal", "standard_normal", "random", "random_sample", "uniform", "integers", "seed",
           "block_seed", "block_seeds", "RandomBlocks", "RandomState", "Generator", "default_rng"]
# every other distribution (poisson, choice, permutation, ...): Dask's own
__getattr__, __dir__, __all__ = fallback(__name__, globals(), "dask.array.random")

def seed(seed=None) -> None:
    """Seed the arrays of later calls without ``seed=``: this module's and Dask's.

    Examples
    --------
    >>> seed(7); a = normal(size=4, chunks=2, backend="cpu")
    >>> seed(7); b = normal(size=4, chunks=2, backend="cpu")
    >>> bool((a == b).all().compute())
    True
    """
    with STATE_LOCK:
        STATE.seed(seed)
    _dask_random.seed(seed)


def normal(loc=0.0, scale=1.0, size=None, chunks="auto", *, dtype="float64", seed=None,
           backend=None) -> da.Array:
    """Normally distributed values.

    Examples
    --------
    >>> x = normal(10, 1, size=(400, 400), chunks=(100, 100), seed=0, backend="cpu")
    >>> round(float(x.mean().compute()), 1)
    10.0
    """
    if _dasks("normal", (loc, scale), size, seed, backend):
        return _dask_random.normal(loc, scale, size, chunks)
    return _make("normal", (float(loc), float(scale)), size, chunks, dtype, seed, backend)


def standard_normal(size=None, chunks="auto", *, dtype="float64", seed=None, backend=None) -> da.Array:
    """``normal(0, 1, size)``."""
    if _dasks("standard_normal", (), size, seed, backend):
        return _dask_random.standard_normal(size, chunks)
    return normal(0.0, 1.0, size, chunks=chunks, dtype=dtype, seed=seed, backend=backend)


def uniform(low=0.0, high=1.0, size=None, chunks="auto", *, dtype="float64", seed=None,
            backend=None) -> da.Array:
    """Values uniform in ``[low, high)``.

    Examples
    --------
    >>> x = uniform(2, 3, size=1000, chunks=100, seed=1, backend="cpu").compute()
    >>> bool((x >= 2).all() and (x < 3).all())
    True
    """
    if _dasks("uniform", (low, high), size, seed, backend):
        return _dask_random.uniform(low, high, size, chunks)
    return _make("uniform", (float(low), float(high)), size, chunks, dtype, seed, backend)


def random(size=None, chunks="auto", *, dtype="float64", seed=None, backend=None) -> da.Array:
    """Values uniform in ``[0, 1)``."""
    if _dasks("random", (), size, seed, backend):
        return _dask_random.random_sample(size, chunks)
    return uniform(0.0, 1.0, size, chunks=chunks, dtype=dtype, seed=seed, backend=backend)


random_sample = random  # Dask's (and NumPy's RandomState's) name for it


def integers(low, high=None, size=None, chunks="auto", *, dtype="int64", seed=None,
             backend=None) -> da.Array:
    """Integers in ``[low, high)`` (``[0, low)`` when ``high`` is None).

    Examples
    --------
    >>> sorted(set(integers(3, size=300, chunks=100, seed=2, backend="cpu").compute().tolist()))
    [0, 1, 2]
    """
    if high is None:
        low, high = 0, low
    low, high = int(low), int(high)
    info = np.iinfo(check_dtype("integers", dtype))
    if not info.min <= low < high <= info.max + 1:
        raise ValueError(f"integers(low={low}, high={high}, dtype={info.dtype.name!r}): need "
                         f"{info.min} <= low < high <= {info.max + 1}")
    return _make("integers", (low, high), size, chunks, dtype, seed, backend)
