"""Dask arrays with CuPy chunks on a GPU and NumPy chunks without one.

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
"""

from hpcgpu.array import linalg, optimization, random
from hpcgpu.array.creation import (arange, ascpu, asgpu, backend_of, empty, from_array, full,
                                   ones, zeros)
from hpcgpu.backends import resolve_backend

__all__ = ["random", "linalg", "optimization", "ones", "zeros", "full", "empty", "arange", "from_array", "asgpu", "ascpu",
           "backend_of", "resolve_backend"]
