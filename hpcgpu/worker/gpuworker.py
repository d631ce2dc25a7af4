"""``GPUWorker``: a ``distributed.Worker`` that sets up its GPU before anything runs on it.

The entry point starts ``dask worker --worker-class hpcgpu.worker.gpuworker.GPUWorker``
and :class:`~hpcgpu.cluster.local.LocalGPUCluster` passes the same class to its nannies. It must
be a worker class rather than a plugin because the device-to-host spilling store is the
worker's ``data=``, fixed at construction (as in dask-cuda's ``CUDAWorker``).
"""

from __future__ import annotations

import gc
import os

from distributed import Worker
from distributed.worker_memory import parse_memory_limit

from hpcgpu.worker.gpusetup import (apply_cpu_affinity, dask_cuda_present, device_data, keep_cupys_pool, logger,
                                    pre_import_here, rmm_plugin, setup_plugins, setup_rmm)
from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions
from hpcgpu.worker.gpuinfo import gpu_handle, nvml_library
from hpcgpu.worker.ucxpool import let_ucx_use_the_worker_pool
from hpcgpu.worker.walltime import install_drain
from hpcgpu.system.warmup import freeze_startup_objects

__all__ = ["GPUWorker", "prepare_gpu"]


def _device_memory(gpu: str | None) -> tuple[int, int] | None:
    """``(free, total)`` bytes of this worker's GPU as NVML sees it, or None without one.

    NVML, not CUDA: asking CUDA would import CuPy and create this process's CUDA context
    before the worker starts (about 0.9 s on an H100, measured as the worker's later
    start beside dask-cuda's, which creates the context in its plugins); whatever runs
    first on the device creates it later. ``gpu``: the physical index or UUID
    (``HPCGPU_GPU``), else the first of ``CUDA_VISIBLE_DEVICES``.
    """
    nvml = nvml_library()
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")  # "" (hpcgpu's CPU mode): no device at all
    name = gpu or ("0" if visible is None else visible.split(",")[0].strip())
    if nvml is None or not name:
        return None
    try:
        info = nvml.nvmlDeviceGetMemoryInfo(gpu_handle(nvml, name))
    except Exception as error:  # said: without it the worker starts with no RMM pool or spilling
        logger.warning("NVML cannot read GPU %s (%s): this worker starts without its GPU set-up", name, error)
        return None
    return int(info.free), int(info.total)


def prepare_gpu(options: GPUWorkerOptions, gpu: str | None, worker_kwargs: dict) -> dict:
    """Affinity, allocator, spilling, pre-imports for this process; fills ``worker_kwargs``'s
    ``data`` (the spilling store) and ``plugins`` (dask-cuda's, run when the worker starts).

    Returns what was done, for the worker's metadata (``WorkerState.extra["hpcgpu"]``).
    """
    done: dict = {"allocator": None, "device_memory_limit": None, "cpu_affinity": None}
    plugins = setup_plugins(options)
    if not plugins:  # no dask-cuda: the same, here
        pre_import_here(options)
    memory = _device_memory(gpu)
    if memory is not None and options.cpu_affinity:
        cores = apply_cpu_affinity(gpu)
        done["cpu_affinity"] = sorted(cores) if cores else None
    if memory is not None:
        _prepare_memory(options, gpu or "0", memory, worker_kwargs, plugins, done)
    if plugins:
        worker_kwargs["plugins"] = list(worker_kwargs.get("plugins") or ()) + plugins
    if memory is not None:  # a CPU worker has no GPU set-up to report
        logger.info("hpcgpu GPU set-up on %s: %s", gpu, done)
    return done


def _prepare_memory(options: GPUWorkerOptions, gpu: str, memory: tuple[int, int],
                    worker_kwargs: dict, plugins: list, done: dict) -> None:
    free, total = memory
    if options.hpcgpu_pool:
        done["allocator"] = setup_rmm("auto", total, free, options.rmm_async)
    elif dask_cuda_present():  # dask-cuda's meaning: its RMMSetup, when the worker starts
        if options.rmm_pool_size is None and not (options.rmm_async or options.rmm_managed_memory):
            keep_cupys_pool()  # no RMM pool: CuPy's own, not RMM's cudaMalloc per array
        plugins.append(rmm_plugin(options))
        done["allocator"] = ("rmm-async" if options.rmm_async else
                             "rmm-pool" if options.rmm_pool_size is not None else "rmm-managed"
                             if options.rmm_managed_memory else "default") + " (dask-cuda RMMSetup)"
    else:
        logger.warning("the rmm_* options are dask-cuda's and it is not installed: install "
                       "hpcgpu's GPU extras (pip install 'hpcgpu[cuda12]'); CuPy keeps its own pool")
    done["ucx_pool_dropped"] = let_ucx_use_the_worker_pool(done["allocator"])
    if "data" not in worker_kwargs or worker_kwargs["data"] is None:
        host_limit = parse_memory_limit(worker_kwargs.get("memory_limit", "auto"),
                                        worker_kwargs.get("nthreads") or 1, logger=logger)
        data = device_data(options, gpu, host_limit)
        if data is not None:
            worker_kwargs["data"] = data
            if isinstance(data, tuple):
                done["device_memory_limit"] = data[1]["device_memory_limit"]


class GPUWorker(Worker):
    """A Dask worker that owns one GPU: RMM pool, CuPy on RMM, spilling, CPU affinity.

    Options come from the environment (:meth:`GPUWorkerOptions.from_env`); without a GPU
    it is a plain ``Worker`` (with the pre-imports).
    """

    def __init__(self, *args, **kwargs):
        self.hpcgpu_setup = prepare_gpu(GPUWorkerOptions.from_env(), os.environ.get("HPCGPU_GPU") or None,
                                        kwargs)
        super().__init__(*args, **kwargs)

    async def start_unsafe(self):
        """Start, then drain (retire gracefully) on SIGUSR1/SIGUSR2 instead of dying, and
        keep the start-up objects out of full collections (:func:`freeze_startup_objects`)."""
        await super().start_unsafe()
        install_drain(self)
        self._hpcgpu_frozen = freeze_startup_objects()
        return self

    async def close(self, *args, **kwargs):
        """Close, and let the collector walk every object again (Python's default): a
        worker started inside a user's script (``hpcgpu.mpi.initialize(exit=False)``)
        leaves nothing of it frozen."""
        try:
            return await super().close(*args, **kwargs)
        finally:
            if getattr(self, "_hpcgpu_frozen", 0):
                self._hpcgpu_frozen = 0
                gc.unfreeze()
