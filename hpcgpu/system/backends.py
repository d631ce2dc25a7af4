"""Is there a usable GPU in this process, and which collection backend follows from it.

Shared by :mod:`hpcgpu.array`, :mod:`hpcgpu.dataframe` (which need not import each other),
:mod:`hpcgpu.cluster.local` and the demo. CUDA libraries are imported only when asked.
"""

from __future__ import annotations

import functools
import importlib

import dask

__all__ = ["cuda_device_count", "module_usable", "resolve_backend", "library_of", "moved_to"]

#: backend name per collection kind: (GPU backend, CPU backend)
_BACKENDS = {"array": ("cupy", "numpy"), "dataframe": ("cudf", "pandas")}


@functools.lru_cache(maxsize=None)
def cuda_device_count() -> int:
    """CUDA devices this process can use (0 without CuPy, a driver or a device)."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no cupy, no driver, no device, or CUDA_VISIBLE_DEVICES=""
        return 0


@functools.lru_cache(maxsize=None)
def module_usable(name: str) -> bool:
    """Whether ``name`` (``cupy``, ``cudf``) imports here and a device is there for it."""
    if cuda_device_count() == 0:
        return False
    try:
        importlib.import_module(name)
    except Exception:
        return False
    return True


def resolve_backend(kind: str, backend: str | None = None) -> str:
    """The backend to build a ``kind`` (``array``/``dataframe``) collection with.

    ``backend`` may be ``"auto"``/None (the GPU library when a GPU and the library are
    there, else NumPy/pandas), ``"gpu"``, ``"cpu"``, or a library name. The default
    comes from the dask config key ``hpcgpu.<kind>.backend``.

    Examples
    --------
    >>> resolve_backend("array", "cpu"), resolve_backend("dataframe", "pandas")
    ('numpy', 'pandas')
    >>> resolve_backend("array", "tpu")
    Traceback (most recent call last):
    ...
    ValueError: backend='tpu' for hpcgpu.array is not one of auto, gpu, cpu, cupy, numpy
    """
    gpu, cpu = _BACKENDS[kind]
    if backend is None:
        backend = dask.config.get(f"hpcgpu.{kind}.backend", "auto")
    choices = ("auto", "gpu", "cpu", gpu, cpu)
    if backend not in choices:
        raise ValueError(f"backend={backend!r} for hpcgpu.{kind} is not one of {', '.join(choices)}")
    if backend == "auto":
        return gpu if module_usable(gpu) else cpu
    if backend in ("gpu", gpu):
        if not module_usable(gpu):
            raise ValueError(
                f"backend={backend!r} for hpcgpu.{kind} needs {gpu} and a CUDA device in this "
                f"process; install hpcgpu[cuda12] or hpcgpu[cuda13] (and [cudf] for dataframes) "
                f"on a GPU machine, or pass backend='cpu'"
            )
        return gpu
    return cpu


def library_of(kind: str, collection) -> str:
    """The library of a ``kind`` collection's chunks or partitions, read from its meta.

    Examples
    --------
    >>> import dask.array as da
    >>> library_of("array", da.ones(3))
    'numpy'
    """
    gpu, cpu = _BACKENDS[kind]
    return gpu if type(collection._meta).__module__.startswith(gpu) else cpu


def moved_to(kind: str, collection, library: str):
    """``collection`` with ``library`` chunks (Dask's ``to_backend``), itself if it has them."""
    return collection if library_of(kind, collection) == library else collection.to_backend(library)
