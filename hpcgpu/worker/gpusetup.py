"""Per-GPU set-up of one worker process: CPU affinity, RMM pool, device-memory spilling.

Options travel from the entry point to the worker process as ``HPCGPU_*`` environment
variables (the nanny hands its environment down). Everything CUDA-related is imported
inside the functions that need it, and each step degrades to a logged no-op where its
library or the GPU is missing, so the CPU mode runs the same code.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from typing import Mapping

from hpcgpu.jobspec.units import parse_device_bytes

__all__ = ["GPUSetup", "parse_device_bytes", "unpack_bitmask", "choose_cores",
           "apply_cpu_affinity", "setup_rmm", "device_data"]

logger = logging.getLogger("distributed.hpcgpu")

#: fraction of the device memory free at start that the RMM pool takes with ``auto``
#: (leaves room for cuBLAS/cuSOLVER handles and NCCL/UCX buffers allocated outside RMM;
#: "free", because another process, or one that is still exiting, may hold some)
AUTO_POOL_FRACTION = 0.9
#: device memory a worker fills before spilling to host with ``auto`` (dask-cuda's default)
AUTO_DEVICE_LIMIT_FRACTION = 0.8


@dataclass(frozen=True)
class GPUSetup:
    """What the worker process sets up on its GPU.

    Attributes
    ----------
    rmm_pool_size : str
        ``auto`` (90 % of the device memory free at start), a size, a fraction, or ``none`` (CuPy's own pool).
    rmm_async : bool
        Use CUDA's stream-ordered allocator (``cudaMallocAsync``) instead of an RMM pool.
    device_memory_limit : str
        Device bytes held before spilling to host: ``auto`` (80 %), a size, a fraction,
        or ``none`` (no spilling).
    cpu_affinity : bool
        Pin the process to the CPU cores near its GPU (within the cores it may use).

    Examples
    --------
    >>> s = GPUSetup(rmm_pool_size="20GB", device_memory_limit="0.5")
    >>> GPUSetup.from_env(s.to_env()) == s
    True
    """

    rmm_pool_size: str = "auto"
    rmm_async: bool = False
    device_memory_limit: str = "auto"
    cpu_affinity: bool = True

    def __post_init__(self) -> None:
        for field in ("rmm_pool_size", "device_memory_limit"):
            value = getattr(self, field)
            if value != "auto":
                parse_device_bytes(value, 1 << 40, field)

    def to_env(self) -> dict[str, str]:
        """``HPCGPU_*`` variables that carry this set-up into the worker process."""
        return {"HPCGPU_RMM_POOL_SIZE": self.rmm_pool_size, "HPCGPU_RMM_ASYNC": str(int(self.rmm_async)),
                "HPCGPU_DEVICE_MEMORY_LIMIT": self.device_memory_limit,
                "HPCGPU_CPU_AFFINITY": str(int(self.cpu_affinity))}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "GPUSetup":
        """The set-up the entry point (or :class:`~hpcgpu.cluster.local.LocalGPUCluster`) asked for."""
        env = os.environ if env is None else env
        return cls(rmm_pool_size=env.get("HPCGPU_RMM_POOL_SIZE", "auto"),
                   rmm_async=env.get("HPCGPU_RMM_ASYNC", "0") == "1",
                   device_memory_limit=env.get("HPCGPU_DEVICE_MEMORY_LIMIT", "auto"),
                   cpu_affinity=env.get("HPCGPU_CPU_AFFINITY", "1") == "1")


def unpack_bitmask(words: list[int], bits: int = 64) -> list[int]:
    """CPU indices set in NVML's affinity words (word 0 holds CPUs 0-63).

    Examples
    --------
    >>> unpack_bitmask([0b1011, 1])
    [0, 1, 3, 64]
    """
    return [w * bits + b for w, word in enumerate(words) for b in range(bits) if word >> b & 1]


def choose_cores(near_gpu: list[int], allowed: set[int]) -> set[int]:
    """The cores to pin to: those near the GPU that the cgroup/cpuset allows.

    Inside a restricted allocation the GPU's cores may lie outside the job's cpuset
    (dask-cuda#1358): then the allowed set is kept as it is.

    Examples
    --------
    >>> sorted(choose_cores([0, 1, 2, 3], {2, 3, 4, 5}))
    [2, 3]
    >>> sorted(choose_cores([0, 1], {4, 5}))
    [4, 5]
    """
    chosen = set(near_gpu) & allowed
    return chosen or set(allowed)


def _gpu_cores(gpu: str) -> list[int] | None:
    from hpcgpu.worker.gpuinfo import gpu_handle, nvml_library

    pynvml = nvml_library()
    if pynvml is None:
        return None
    try:
        words = pynvml.nvmlDeviceGetCpuAffinity(gpu_handle(pynvml, gpu), math.ceil((os.cpu_count() or 1) / 64))
        return unpack_bitmask(list(words))
    except Exception:  # no NVML, no device, MIG instance without affinity
        return None


def apply_cpu_affinity(gpu: str | None) -> set[int] | None:
    """Pin every thread of this process to the cores near ``gpu``; the cores, or None."""
    if not gpu or not hasattr(os, "sched_setaffinity"):
        return None
    near = _gpu_cores(gpu)
    if near is None:
        return None
    allowed = os.sched_getaffinity(0)
    cores = choose_cores(near, allowed)
    if cores == allowed:
        return cores
    # sched_setaffinity(0) pins one thread only: pin each existing thread (later ones inherit)
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except OSError:  # a thread that ended meanwhile, or a cpuset we may not enter
            pass
    return cores


def setup_rmm(setup: GPUSetup, total: int, free: int | None = None) -> str:
    """Make RMM the allocator of CuPy (and cuDF) on the current device; what was set up."""
    try:
        import rmm
        from rmm.allocators.cupy import rmm_cupy_allocator
    except ImportError:
        return "cupy-pool (rmm not installed)"
    pool = parse_device_bytes(setup.rmm_pool_size, total, "rmm_pool_size") if setup.rmm_pool_size != "auto" \
        else int((total if free is None else free) * AUTO_POOL_FRACTION) // 256 * 256
    if setup.rmm_async:
        rmm.mr.set_current_device_resource(rmm.mr.CudaAsyncMemoryResource(initial_pool_size=pool))
        described = f"rmm-async (initial {pool})"
    elif pool:
        rmm.reinitialize(pool_allocator=True, initial_pool_size=pool)
        described = f"rmm-pool ({pool} bytes)"
    else:
        # CuPy keeps its own pool: RMM without a pool would cudaMalloc and cudaFree every
        # array, and each cudaFree waits for the device (8.0 s instead of 2.2 s for the
        # array-sum on one H200)
        return "cupy-pool (rmm_pool_size=none)"
    try:
        import cupy
    except ImportError:
        return described
    # cudaMallocAsync orders each free on its stream: CuPy takes from it directly
    cupy.cuda.set_allocator(rmm_cupy_allocator if setup.rmm_async
                            else cupy_pool_over_rmm(cupy, rmm, rmm_cupy_allocator).malloc)
    return described


def cupy_pool_over_rmm(cupy, rmm, rmm_cupy_allocator):
    """CuPy's own pool, taking its memory from RMM's: CuPy reuses a freed block without a
    Python call (RMM's CuPy allocator costs tens of microseconds an array: 0.28 s of the
    1.33 s array-sum on one H200), and cuDF and UCX still share RMM's pool. When RMM runs
    out, the blocks CuPy keeps free go back to it and the allocation is tried again."""
    pool = cupy.cuda.MemoryPool(rmm_cupy_allocator)

    def give_back(nbytes: int) -> bool:  # True: try the allocation again
        if not pool.free_bytes():
            return False
        pool.free_all_blocks()
        return True

    current = rmm.mr.get_current_device_resource()
    rmm.mr.set_current_device_resource(rmm.mr.FailureCallbackResourceAdaptor(current, give_back))
    return pool


def device_data(setup: GPUSetup, total: int, memory_limit: int | None):
    """``data=`` for the Worker: dask-cuda's DeviceHostFile (device -> host -> disk), or None."""
    limit = (int(total * AUTO_DEVICE_LIMIT_FRACTION) if setup.device_memory_limit == "auto"
             else parse_device_bytes(setup.device_memory_limit, total, "device_memory_limit"))
    if limit is None:
        return None
    try:
        from dask_cuda.device_host_file import DeviceHostFile
    except ImportError:
        logger.warning("dask-cuda is not installed: no spilling from device to host memory")
        return None
    return (DeviceHostFile, {"device_memory_limit": limit, "memory_limit": memory_limit})
