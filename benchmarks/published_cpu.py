"""Stand-ins that run ``published_steps.py`` without a GPU (``published_code.py --cpu``).

NumPy for CuPy, pandas for cuDF, a no-op RMM allocator, and the two clusters on CPU
workers: Dask's ``LocalCluster`` for dask-cuda's, and hpcgpu's ``LocalGPUCluster`` without
GPUs. The GPU-only keywords (``CUDA_VISIBLE_DEVICES``, ``device_memory_limit``,
``rmm_pool_size``) are dropped here: on a CPU they have nothing to act on. The smoke run
checks the plumbing and each step's result, not speed.
"""

from __future__ import annotations

import types

import numpy

import dask.array

GPU_ONLY = ("CUDA_VISIBLE_DEVICES", "device_memory_limit", "rmm_pool_size")
CPU_CLUSTER = dict(n_workers=1, threads_per_worker=2)
_allocator = [None]  # per worker process: what set_allocator was given


def _set_allocator(allocator) -> None:
    _allocator[0] = allocator


def _get_allocator():
    return _allocator[0]


def rmm_cupy_allocator(nbytes):  # named as RMM's, so the check reads the same name
    raise NotImplementedError("the CPU stand-in allocates nothing")


cupy = types.SimpleNamespace(
    random=numpy.random, linalg=numpy.linalg, asnumpy=numpy.asarray, asarray=numpy.asarray,
    arange=numpy.arange,
    cuda=types.SimpleNamespace(set_allocator=_set_allocator, get_allocator=_get_allocator))
rmm = types.SimpleNamespace(allocators=types.SimpleNamespace(
    cupy=types.SimpleNamespace(rmm_cupy_allocator=rmm_cupy_allocator)))
dask_cudf = types.SimpleNamespace(from_dask_dataframe=lambda df: df)


def _cpu_only(kwargs: dict) -> dict:
    return {k: v for k, v in kwargs.items() if k not in GPU_ONLY}


def LocalDaskCluster(**kwargs):
    """dask-cuda's side on a CPU: ``distributed.LocalCluster``."""
    from distributed import LocalCluster

    return LocalCluster(**{**CPU_CLUSTER, "dashboard_address": "127.0.0.1:0", **_cpu_only(kwargs)})


def LocalHpcgpuCluster(**kwargs):
    """hpcgpu's side on a CPU: ``LocalGPUCluster`` with no GPUs."""
    from hpcgpu import LocalGPUCluster

    return LocalGPUCluster(**{**CPU_CLUSTER, "gpus": [], **_cpu_only(kwargs)})


def hpcgpu_array():
    """``hpcgpu.array`` where it has what the steps call, else ``dask.array`` (recorded)."""
    import hpcgpu.array as ha

    random = getattr(ha, "random", None)
    return ha if hasattr(random, "RandomState") else dask.array
