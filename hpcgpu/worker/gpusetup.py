"""Per-GPU set-up of one worker process, on dask-cuda's own plumbing.

Where a GPU and dask-cuda are present, the RMM set-up is dask-cuda's ``RMMSetup``, the
device-to-host spilling store dask-cuda's ``worker_data_function`` (``DeviceHostFile``),
the cores near the GPU ``dask_cuda.utils.get_cpu_affinity``, and pre-imports and cuDF
spilling dask-cuda's ``PreImport``/``CUDFSetup`` plugins. hpcgpu adds what dask-cuda lacks:
its default pool (90 % of the free device memory) with CuPy's pool drawing from RMM's,
pinning every thread within the allowed cpuset (dask-cuda pins one thread and fails inside
a restricted cpuset, dask-cuda#1358), and a CPU path for hosts without a GPU or dask-cuda.
Everything CUDA-related is imported inside the functions that need it.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os

from dask.utils import parse_bytes

from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions

__all__ = ["AUTO_POOL_FRACTION", "dask_cuda_present", "choose_cores", "apply_cpu_affinity",
           "setup_rmm", "cupy_pool_over_rmm", "rmm_plugin", "setup_plugins", "device_data",
           "pre_import_here", "cudf_spill_here", "parent_side_setup", "keep_cupys_pool"]

logger = logging.getLogger("distributed.hpcgpu")

#: fraction of the device memory free at start that hpcgpu's default RMM pool takes
#: (leaves room for cuBLAS/cuSOLVER handles and NCCL/UCX buffers allocated outside RMM;
#: "free", because another process, or one that is still exiting, may hold some)
AUTO_POOL_FRACTION = 0.9
_INSTALL = "install hpcgpu's GPU extras (pip install 'hpcgpu[cuda12]') for dask-cuda"
_INSTALL_RMM = "pip install 'hpcgpu[cuda12]' (or cuda13) brings rmm-cu12 (rmm-cu13)"


def rmm_present() -> bool:
    """Whether RMM can be imported (the GPU extras bring it; dask-cuda does not require it)."""
    try:
        import rmm  # noqa: F401
    except ImportError:
        return False
    return True


def dask_cuda_present() -> bool:
    """Whether dask-cuda can be imported (it is in the GPU extras only)."""
    try:
        import dask_cuda.plugins  # noqa: F401
    except ImportError:
        return False
    return True


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


def apply_cpu_affinity(gpu: str | None) -> set[int] | None:
    """Pin every thread of this process to the cores near ``gpu`` (dask-cuda's NVML query);
    the cores, or None where there is no GPU or no dask-cuda."""
    if not gpu or not hasattr(os, "sched_setaffinity") or not dask_cuda_present():
        return None
    import warnings

    from dask_cuda.utils import get_cpu_affinity

    with warnings.catch_warnings():  # no affinity known: dask-cuda falls back to every CPU
        warnings.simplefilter("ignore")
        near = get_cpu_affinity(int(gpu) if gpu.isdigit() else gpu)
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


def _pool_bytes(size, total: int, free: int | None) -> int | None:
    """The pool's bytes, aligned to 256 as RMM wants.

    >>> _pool_bytes("auto", 1000, 512), _pool_bytes("0.5", 1024, None), _pool_bytes("1KiB", 0, None)
    (256, 512, 1024)
    >>> _pool_bytes(None, 1, 1) is None and _pool_bytes("none", 1, 1) is None
    True
    """
    if size == "auto":
        return int((total if free is None else free) * AUTO_POOL_FRACTION) // 256 * 256
    if size is None or str(size).strip().lower() in ("0", "none", ""):
        return None
    number = float(size) if str(size).replace(".", "", 1).isdigit() else None
    if number is not None and 0 < number <= 1 and not (isinstance(size, int) or str(size) == "1"):
        return int(total * number) // 256 * 256
    return int(parse_bytes(str(size)) if isinstance(size, str) else size) // 256 * 256


def _import_cudf_first() -> None:
    """cuDF sets CuPy's allocator to RMM's plain one when it is imported (its
    ``__init__``): imported here first, where it is installed, so that the allocator chosen
    next is the one that stays when a task or a plugin imports cuDF later."""
    if importlib.util.find_spec("cudf") is None:
        return
    try:
        import cudf  # noqa: F401
    except Exception as error:  # a broken cuDF must not stop a worker that never uses it
        logger.warning("cuDF is installed but does not import here (%s): its own import, if "
                       "a task makes it, will set CuPy's allocator to RMM's", error)


def keep_cupys_pool() -> None:
    """CuPy's own pool as CuPy's allocator, with cuDF (where installed) imported first: its
    import would replace it later."""
    _import_cudf_first()
    try:
        import cupy
    except ImportError:
        return
    cupy.cuda.set_allocator(cupy.get_default_memory_pool().malloc)


def setup_rmm(pool_size, total: int, free: int | None = None, rmm_async: bool = False) -> str:
    """hpcgpu's allocator on the current device: an RMM pool (dask-cuda's ``RMMSetup``)
    that CuPy's pool draws from (:func:`cupy_pool_over_rmm`); what was set up.

    ``pool_size``: ``"auto"`` (90 % of ``free``), bytes, a size or a fraction of ``total``;
    None keeps CuPy's own pool: RMM without a pool would cudaMalloc and cudaFree every
    array, and each cudaFree waits for the device (8.0 s instead of 2.2 s for the
    array-sum on one H200).
    """
    pool = _pool_bytes(pool_size, total, free)
    _import_cudf_first()
    if not dask_cuda_present():
        keep_cupys_pool()
        return f"cupy-pool (dask-cuda not installed: {_INSTALL})"
    if pool is None and not rmm_async:
        keep_cupys_pool()
        return "cupy-pool (rmm_pool_size=none)"
    if not rmm_present():  # dask-cuda alone: the default pool falls back, an asked one fails
        if pool_size != "auto" or rmm_async:
            raise ImportError(f"{'rmm_async=True' if rmm_async else f'rmm_pool_size={pool_size!r}'} "
                              f"needs RMM, which is not installed: {_INSTALL_RMM}")
        keep_cupys_pool()
        return f"cupy-pool (rmm not installed: {_INSTALL_RMM})"
    import rmm
    from dask_cuda.plugins import RMMSetup
    from rmm.allocators.cupy import rmm_cupy_allocator

    RMMSetup(initial_pool_size=pool, maximum_pool_size=None, managed_memory=False,
             async_alloc=rmm_async, release_threshold=None, log_directory=None,
             track_allocations=False, external_lib_list=None).setup(worker=None)
    described = f"rmm-async (initial {pool})" if rmm_async else f"rmm-pool ({pool} bytes)"
    try:
        import cupy
    except ImportError:
        return described
    # cudaMallocAsync orders each free on its stream: CuPy takes from it directly
    cupy.cuda.set_allocator(rmm_cupy_allocator if rmm_async
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


def rmm_plugin(options: GPUWorkerOptions):
    """dask-cuda's ``RMMSetup`` for options with dask-cuda's meaning of RMM (the worker
    runs it at start, as dask-cuda's workers do)."""
    from dask_cuda.plugins import RMMSetup

    libs = list(options.rmm_allocator_external_lib_list) if options.rmm_allocator_external_lib_list else None
    return RMMSetup(initial_pool_size=options.rmm_pool_size,
                    maximum_pool_size=options.rmm_maximum_pool_size,
                    managed_memory=options.rmm_managed_memory, async_alloc=options.rmm_async,
                    release_threshold=options.rmm_release_threshold,
                    log_directory=options.rmm_log_directory,
                    track_allocations=options.rmm_track_allocations, external_lib_list=libs)


def setup_plugins(options: GPUWorkerOptions) -> list:
    """dask-cuda's ``PreImport`` and ``CUDFSetup`` plugins (empty without dask-cuda)."""
    if not dask_cuda_present():
        return []
    from dask_cuda.plugins import CUDFSetup, PreImport

    return [PreImport(list(options.pre_import or ())),
            CUDFSetup(spill=options.enable_cudf_spill, spill_stats=options.cudf_spill_stats)]


def pre_import_here(options: GPUWorkerOptions) -> None:
    """Without dask-cuda: the pre-imports and cuDF's spilling set here, before the worker starts."""
    for module in options.pre_import or ():
        importlib.import_module(module)
    if options.enable_cudf_spill:
        cudf_spill_here(options.cudf_spill_stats)


def cudf_spill_here(stats: int) -> None:
    """cuDF's spilling in this process, as dask-cuda sets it (nothing without cuDF)."""
    try:
        import cudf
    except ImportError:
        return
    cudf.set_option("spill", True)
    cudf.set_option("spill_stats", stats)


def device_data(options: GPUWorkerOptions, device: str, memory_limit):
    """``data=`` for the Worker, from dask-cuda's ``worker_data_function``: its
    ``DeviceHostFile`` (device -> host -> disk) with ``device_memory_limit``, ``{}`` (no
    limits), or None (Dask's default store); None without dask-cuda, with a warning."""
    if not dask_cuda_present():
        if options.device_memory_limit not in (None, 0, "0"):
            logger.warning("no spilling from device to host memory: %s", _INSTALL)
        return None
    from dask_cuda.worker_common import worker_data_function

    index = int(device) if device.isdigit() else device
    return worker_data_function(device_memory_limit=options.device_memory_limit,
                                memory_limit=memory_limit,
                                enable_cudf_spill=options.enable_cudf_spill)(index)


def parent_side_setup(options: GPUWorkerOptions, device: str | None, nanny_options: dict) -> dict:
    """For a worker class of the user's own (not hpcgpu's ``GPUWorker``): dask-cuda's
    plugins and spilling store for ``device``, made in the cluster's process as
    ``LocalCUDACluster`` makes them (nanny options to add; empty without dask-cuda)."""
    if not dask_cuda_present():
        return {}
    plugins = list(nanny_options.get("plugins") or ())
    out: dict = {}
    if device is None:
        plugins += setup_plugins(options)
    else:
        from dask_cuda.worker_common import worker_data_function, worker_plugins

        index = int(device) if device.isdigit() else device
        libs = list(options.rmm_allocator_external_lib_list) if options.rmm_allocator_external_lib_list else None
        plugins += list(worker_plugins(
            device_index=index, rmm_initial_pool_size=None if options.hpcgpu_pool else options.rmm_pool_size,
            rmm_maximum_pool_size=options.rmm_maximum_pool_size, rmm_managed_memory=options.rmm_managed_memory,
            rmm_async_alloc=options.rmm_async, rmm_release_threshold=options.rmm_release_threshold,
            rmm_log_directory=options.rmm_log_directory, rmm_track_allocations=options.rmm_track_allocations,
            rmm_allocator_external_lib_list=libs, pre_import=list(options.pre_import or ()),
            enable_cudf_spill=options.enable_cudf_spill, cudf_spill_stats=options.cudf_spill_stats))
        if nanny_options.get("data") is None:
            memory = nanny_options.get("memory_limit")
            out["data"] = worker_data_function(
                device_memory_limit=options.device_memory_limit,
                memory_limit=memory if isinstance(memory, int) else None,
                enable_cudf_spill=options.enable_cudf_spill)(index)
    out["plugins"] = plugins
    return out
