"""Dask arrays with CuPy chunks on a GPU and NumPy chunks without one.

A superset of :mod:`dask.array`: ``import hpcgpu.array as da`` runs code written for
``dask.array``. hpcgpu's own functions come first (constructors that put chunks on the
GPU, fused random generators, cluster-sized ``linalg``); every other name, here and in the
submodules (``random``, ``linalg``, ``fft``, ``ma``, ``stats``, ``overlap``, ``image``,
``gufunc``, ``utils``, ``lib.stride_tricks``), is Dask's own object, found through a
module ``__getattr__`` (:mod:`hpcgpu.system.reexport`); ``stats``, which needs scipy,
is imported on first use, as Dask does. Dask itself is not modified.

The functions return plain :class:`dask.array.Array` objects (made through Dask's own
``array.backend`` dispatch and ``to_backend``), so the rest of ``dask.array`` works on
them: reductions, slicing, ``dot``, ``linalg.svd``/``qr``, ``map_blocks``.
:mod:`hpcgpu.array.linalg` has ``svd`` and ``qr`` on row blocks sized for the cluster.

Examples
--------
>>> import hpcgpu.array as ha
>>> x = ha.random.normal(10, 1, size=(1000, 1000), chunks=(250, 250), seed=0, backend="cpu")
>>> round(float((x + 1)[::2, ::2].mean().compute()))
11
>>> isinstance(x, ha.Array), ha.einsum is __import__("dask.array").array.einsum
(True, True)
"""

import importlib

from hpcgpu.array import fft, gufunc, image, lib, linalg, ma, optimization, overlap, random, utils
from hpcgpu.array.plane import argsort, matmul, rechunk, sort, transpose
from hpcgpu.array.creation import (arange, ascpu, asgpu, backend_of, empty, from_array, full,
                                   ones, zeros)
from hpcgpu.system.backends import resolve_backend
from hpcgpu.system.reexport import fallback

# Imported on first use, as dask.array does: dask.array.stats needs scipy, which neither
# Dask nor hpcgpu installs, so an eager import broke `import hpcgpu.array` (and
# `hpcgpu demo`) in every environment without it. Not in __all__ (nor is it in Dask's),
# so `from hpcgpu.array import *` needs no scipy either.
_LAZY = ("stats",)

__all__ = ["random", "linalg", "optimization", "rechunk", "transpose", "matmul", "sort", "argsort", "ones", "zeros", "full", "empty", "arange", "from_array", "asgpu", "ascpu",
           "backend_of", "resolve_backend", "fft", "ma", "overlap", "image", "gufunc", "utils", "lib"]
_dask_getattr, _dask_dir, __all__ = fallback(__name__, globals(), "dask.array")


def __getattr__(attr: str):
    if attr in _LAZY:
        return importlib.import_module(f"{__name__}.{attr}")  # binds it here too
    return _dask_getattr(attr)


def __dir__() -> list[str]:
    return sorted(set(_dask_dir()) | set(_LAZY))
