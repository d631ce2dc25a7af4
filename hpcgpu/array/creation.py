"""Array constructors and backend moves, through Dask's own backend dispatch.

``ones``/``zeros``/``full``/``arange`` take dask.array's arguments and run its constructors under
``array.backend`` set to the resolved backend (``cupy`` on a GPU, ``numpy`` otherwise);
``asgpu``/``ascpu`` are ``Array.to_backend``. Nothing is subclassed: the results are
plain ``dask.array.Array`` objects whose chunks are CuPy or NumPy arrays.
"""

from __future__ import annotations

from typing import Any

import dask
import dask.array as da

from hpcgpu.array.optimization import mark
from hpcgpu.system.backends import library_of, moved_to, resolve_backend
from hpcgpu.system.reexport import fallback

__all__ = ["ones", "zeros", "full", "empty", "arange", "from_array", "asgpu", "ascpu", "backend_of"]
# the rest of dask.array.creation (linspace, eye, ...): Dask's own
__getattr__, __dir__, __all__ = fallback(__name__, globals(), "dask.array.creation")


def _mark(x):
    # Dask's array_plugins may turn a new array into anything (a computed one, say)
    return mark(x) if isinstance(x, da.Array) else x


def _with_backend(func: str, backend: str | None, /, *args: Any, **kwargs: Any) -> da.Array:
    if kwargs.get("like") is not None:  # Dask's NEP-35 dispatch picks the library itself
        return getattr(da, func)(*args, **kwargs)
    with dask.config.set({"array.backend": resolve_backend("array", backend)}):
        return _mark(getattr(da, func)(*args, **kwargs))


def ones(*args, backend: str | None = None, **kwargs) -> da.Array:
    """An array of ones: :func:`dask.array.ones` (same arguments) on ``backend``.

    Examples
    --------
    >>> x = ones((4, 4), chunks=2, backend="cpu")
    >>> int(x.sum().compute()), type(x._meta).__module__
    (16, 'numpy')
    """
    return _with_backend("ones", backend, *args, **kwargs)


def zeros(*args, backend: str | None = None, **kwargs) -> da.Array:
    """An array of zeros (see :func:`ones`)."""
    return _with_backend("zeros", backend, *args, **kwargs)


def empty(*args, backend: str | None = None, **kwargs) -> da.Array:
    """An uninitialised array (see :func:`ones`)."""
    return _with_backend("empty", backend, *args, **kwargs)


def full(*args, backend: str | None = None, **kwargs) -> da.Array:
    """An array filled with ``fill_value``: :func:`dask.array.full` on ``backend``.

    Examples
    --------
    >>> float(full((3, 3), 2.5, chunks=2, backend="cpu").sum().compute())
    22.5
    """
    return _with_backend("full", backend, *args, **kwargs)


def arange(*args, backend: str | None = None, **kwargs) -> da.Array:
    """Evenly spaced values, as :func:`dask.array.arange`.

    Examples
    --------
    >>> arange(0, 10, 2, chunks=2, backend="cpu").compute().tolist()
    [0, 2, 4, 6, 8]
    """
    return _with_backend("arange", backend, *args, **kwargs)


def from_array(x, chunks="auto", *args: Any, backend: str | None = None, **kwargs: Any) -> da.Array:
    """:func:`dask.array.from_array` (same arguments; CuPy input stays CuPy), moved to ``backend``.

    Examples
    --------
    >>> import numpy as np
    >>> from_array(np.arange(6), chunks=3, backend="cpu").sum().compute().item()
    15
    """
    made = da.from_array(x, chunks, *args, **kwargs)
    return _mark(moved_to("array", made, resolve_backend("array", backend)) if isinstance(made, da.Array) else made)


def backend_of(x: da.Array) -> str:
    """``"cupy"`` or ``"numpy"``: the library of ``x``'s chunks (from its meta).

    Examples
    --------
    >>> backend_of(ones(3, backend="cpu"))
    'numpy'
    """
    return library_of("array", x)


def asgpu(x: da.Array) -> da.Array:
    """``x`` with CuPy chunks (``to_backend("cupy")``); a ValueError without a GPU."""
    return mark(moved_to("array", x, resolve_backend("array", "gpu")))


def ascpu(x: da.Array) -> da.Array:
    """``x`` with NumPy chunks (``to_backend("numpy")``).

    Examples
    --------
    >>> backend_of(ascpu(ones(3, backend="cpu")))
    'numpy'
    """
    return mark(moved_to("array", x, "numpy"))
