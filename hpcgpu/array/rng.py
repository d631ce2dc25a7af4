"""Dask's ``RandomState`` and ``Generator``, on hpcgpu's fused generators where a GPU
library backs them.

``RandomState(RandomState=cupy.random.RandomState)``, ``default_rng(cupy.random.default_rng(seed))``
and, under ``dask.config.set({"array.backend": "cupy"})``, ``RandomState()``/``default_rng()``
are Dask's idiomatic CuPy random arrays. Here their ``normal``, ``standard_normal``,
``uniform``, ``random``/``random_sample`` and ``integers``/``randint`` (scalar parameters,
a given ``size``) draw each block with hpcgpu's Philox kernel
(:func:`hpcgpu.array.random.normal` and friends), which hpcgpu's optimiser fuses with what
follows. The distributions are the same; the values are hpcgpu's stream, not CuPy's:
each call takes a 64-bit seed from the object's own state (so a seeded object repeats its
arrays, and successive calls differ). Every other method, and any generator whose library
is not a fused one (NumPy's), is Dask's own code, unchanged.

The library is recognised by the generator's module name (``cupy.…``), without importing
CuPy: :func:`fused_backend`.
"""

from __future__ import annotations


import numpy as np

import dask.array.random as _dask_random

from hpcgpu.array.draw import check_dtype, make, scalars

__all__ = ["RandomState", "Generator", "default_rng", "fused_backend", "FUSED_LIBRARIES"]

#: library of a generator (first part of its module name) -> hpcgpu.array backend that draws for it
FUSED_LIBRARIES = {"cupy": "cupy"}


def fused_backend(generator) -> str | None:
    """The hpcgpu backend whose fused generator stands in for ``generator`` (a class,
    a bit generator, a Generator or a RandomState), or None for Dask's own path.

    Examples
    --------
    >>> fused_backend(np.random.RandomState) is None
    True
    >>> Fake = type("RandomState", (), {"__module__": "cupy.random._generator"})
    >>> fused_backend(Fake), fused_backend(Fake())
    ('cupy', 'cupy')
    """
    cls = generator if isinstance(generator, type) else type(generator)
    return FUSED_LIBRARIES.get(cls.__module__.split(".")[0])


def _fusable(method, args, size, dtype, kwargs, *params) -> bool:
    """Whether hpcgpu's kernel draws exactly this call: scalar parameters, a ``size``,
    no other keyword, a dtype it makes, integer bounds inside the dtype."""
    if size is None or kwargs or not scalars(*params):
        return False
    try:
        dtype = check_dtype(method, dtype)
    except TypeError:
        return False
    if method == "integers":
        info = np.iinfo(dtype)
        return info.min <= args[0] < args[1] <= info.max + 1
    return True


class _FusedDraws:
    """Which hpcgpu backend draws for the generator in attribute ``_source``, and its draws."""

    _source: str

    @property
    def fused_backend(self) -> str | None:
        """The hpcgpu backend drawing this object's arrays, or None (Dask's path)."""
        return fused_backend(getattr(self, self._source))

    def _fused(self, method, args, size, chunks, dtype, kwargs, *params):
        if self.fused_backend is None or not _fusable(method, args, size, dtype, kwargs, *params):
            return None
        return make(method, args, size, chunks, dtype, self._seed_of_call(), self.fused_backend)


class RandomState(_FusedDraws, _dask_random.RandomState):
    """:class:`dask.array.random.RandomState`; CuPy-backed ones draw with hpcgpu's kernels.

    Examples
    --------
    >>> rs = RandomState(42)  # NumPy's: Dask's own path and values
    >>> import dask.array as da
    >>> bool((rs.normal(size=4, chunks=2) == da.random.RandomState(42).normal(size=4, chunks=2)).all())
    True
    """

    _source = "_RandomState"

    def _seed_of_call(self) -> int:
        return int(self._numpy_state.randint(0, 2**63 - 1, dtype=np.int64))

    def normal(self, loc=0.0, scale=1.0, size=None, chunks="auto", **kwargs):
        out = self._fused("normal", (loc, scale), size, chunks, "float64", kwargs, loc, scale)
        return super().normal(loc, scale, size, chunks, **kwargs) if out is None else out

    def standard_normal(self, size=None, chunks="auto", **kwargs):
        out = self._fused("normal", (0.0, 1.0), size, chunks, "float64", kwargs)
        return super().standard_normal(size, chunks, **kwargs) if out is None else out

    def uniform(self, low=0.0, high=1.0, size=None, chunks="auto", **kwargs):
        out = self._fused("uniform", (low, high), size, chunks, "float64", kwargs, low, high)
        return super().uniform(low, high, size, chunks, **kwargs) if out is None else out

    def random_sample(self, size=None, chunks="auto", **kwargs):
        out = self._fused("uniform", (0.0, 1.0), size, chunks, "float64", kwargs)
        return super().random_sample(size, chunks, **kwargs) if out is None else out

    def randint(self, low, high=None, size=None, chunks="auto", dtype="l", **kwargs):
        lo, hi = (0, low) if high is None else (low, high)
        out = None
        if scalars(lo, hi):
            out = self._fused("integers", (int(lo), int(hi)), size, chunks, dtype, kwargs)
        return super().randint(low, high, size, chunks, dtype, **kwargs) if out is None else out


class Generator(_FusedDraws, _dask_random.Generator):
    """:class:`dask.array.random.Generator`; CuPy-backed ones draw with hpcgpu's kernels."""

    _source = "_bit_generator"

    def _seed_of_call(self) -> int | None:
        bits = self._bit_generator
        seq = getattr(bits, "seed_seq", None) or getattr(bits, "_seed_seq", None)
        if not isinstance(seq, np.random.SeedSequence):
            return None  # fresh entropy per call
        return int(seq.spawn(1)[0].generate_state(1, np.uint64)[0])

    def normal(self, loc=0.0, scale=1.0, size=None, chunks="auto", **kwargs):
        out = self._fused("normal", (loc, scale), size, chunks, "float64", kwargs, loc, scale)
        return super().normal(loc, scale, size, chunks, **kwargs) if out is None else out

    def standard_normal(self, size=None, chunks="auto", **kwargs):
        rest = {k: v for k, v in kwargs.items() if k != "dtype"}
        out = self._fused("normal", (0.0, 1.0), size, chunks, kwargs.get("dtype", np.float64), rest)
        return super().standard_normal(size, chunks, **kwargs) if out is None else out

    def uniform(self, low=0.0, high=1.0, size=None, chunks="auto", **kwargs):
        out = self._fused("uniform", (low, high), size, chunks, "float64", kwargs, low, high)
        return super().uniform(low, high, size, chunks, **kwargs) if out is None else out

    def random(self, size=None, dtype=np.float64, out=None, chunks="auto", **kwargs):
        arr = None if out is not None else self._fused("uniform", (0.0, 1.0), size, chunks, dtype, kwargs)
        return super().random(size, dtype, out, chunks, **kwargs) if arr is None else arr

    def integers(self, low, high=None, size=None, dtype=np.int64, endpoint=False, chunks="auto", **kwargs):
        lo, hi = (0, low) if high is None else (low, high)
        out = None
        if not endpoint and scalars(lo, hi):
            out = self._fused("integers", (int(lo), int(hi)), size, chunks, dtype, kwargs)
        if out is None:
            return super().integers(low, high, size, dtype, endpoint, chunks, **kwargs)
        return out


for _cls in (RandomState, Generator):  # Dask's docstrings on the methods drawn here
    for _name, _method in list(vars(_cls).items()):
        if callable(_method) and not _name.startswith("_"):
            _method.__doc__ = getattr(_cls.__bases__[-1], _name).__doc__


def default_rng(seed=None) -> Generator:
    """:func:`dask.array.random.default_rng`, as this module's :class:`Generator`.

    Examples
    --------
    >>> rng = default_rng(0)
    >>> isinstance(rng, _dask_random.Generator), rng.fused_backend is None
    (True, True)
    """
    rng = _dask_random.default_rng(seed)
    return rng if isinstance(rng, Generator) else Generator(rng._bit_generator)
