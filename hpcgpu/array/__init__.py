"""Dask arrays with CuPy chunks on a GPU and NumPy chunks without one.

A superset of :mod:`dask.array`: ``import hpcgpu.array as da`` runs code written for
``dask.array``. hpcgpu's own functions come first (constructors that put chunks on the
GPU, fused random generators, cluster-sized ``linalg``); every other name, here and in the
submodules (``random``, ``linalg``, ``fft``, ``ma``, ``stats``, ``overlap``, ``image``,
``gufunc``, ``utils``, ``lib.stride_tricks``), is Dask's own object, found through a
module ``__getattr__`` (:mod:`hpcgpu.system.reexport`). Dask itself is not modified.

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

from hpcgpu.array import (fft, gufunc, image, lib, linalg, ma, optimization, overlap, random, stats,
                          utils)
from hpcgpu.array.creation import (arange, ascpu, asgpu, backend_of, empty, from_array, full,
                                   ones, zeros)
from hpcgpu.system.backends import resolve_backend
from hpcgpu.system.reexport import fallback

__all__ = ["random", "linalg", "optimization", "ones", "zeros", "full", "empty", "arange", "from_array", "asgpu", "ascpu",
           "backend_of", "resolve_backend", "fft", "ma", "stats", "overlap", "image", "gufunc", "utils", "lib"]
__getattr__, __dir__, __all__ = fallback(__name__, globals(), "dask.array")
