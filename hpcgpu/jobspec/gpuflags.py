"""The GPU flags of ``dask cuda worker``, shared by ``python -m hpcgpu.worker`` and ``hpcgpu worker``.

Names, forms and defaults are dask-cuda 26.10's (``dask_cuda/cli.py``), plus hpcgpu's
``--cpu-affinity/--no-cpu-affinity``; :func:`options_from_flags` turns the parsed values
into one :class:`~hpcgpu.jobspec.gpuoptions.GPUWorkerOptions`.
"""

from __future__ import annotations

from typing import Any, Callable

import click

from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions

__all__ = ["GPU_FLAGS", "GPU_OPTION_NAMES", "TRANSPORT_FLAGS", "gpu_flags", "options_from_flags", "given_flags",
           "flag_argv"]

_SIZE = "bytes, a size (5GB) or a fraction of the device's memory (0.9)"

#: (click parameter declarations, settings): the GPU flags, in dask-cuda's order
GPU_FLAGS: tuple[tuple[tuple[str, ...], dict], ...] = (
    (("--device-memory-limit",), dict(default="default", show_default=True, help=(
        "Spill device memory to host beyond this: default (80%), auto (all of it), "
        f"{_SIZE}, or 0 (no device spilling)."))),
    (("--enable-cudf-spill/--disable-cudf-spill",), dict(default=False, show_default=True,
                                                          help="cuDF's automatic spilling.")),
    (("--cudf-spill-stats",), dict(type=int, default=0, help="cuDF's spilling statistics level.")),
    (("--rmm-pool-size",), dict(default=None, help=(
        f"RMM pool per worker: {_SIZE}, or none. Unset, and no other --rmm-* flag: hpcgpu's "
        "default, a pool of 90% of the free device memory that CuPy's pool draws from."))),
    (("--rmm-maximum-pool-size",), dict(default=None, help=f"The pool's maximum size: {_SIZE}.")),
    (("--rmm-managed-memory/--no-rmm-managed-memory",), dict(default=False, show_default=True,
                                                              help="RMM on CUDA managed memory.")),
    (("--rmm-async/--no-rmm-async",), dict(default=False, show_default=True,
                                           help="RMM's asynchronous allocator (cudaMallocAsync).")),
    (("--set-rmm-allocator-for-libs", "rmm_allocator_external_lib_list"), dict(
        default=None, help="Make RMM the allocator of these libraries: cupy, torch (comma-separated).")),
    (("--rmm-release-threshold",), dict(default=None, help=(
        f"With --rmm-async: release unused pool memory beyond this ({_SIZE})."))),
    (("--rmm-log-directory",), dict(default=None, help="Directory for per-worker RMM logs.")),
    (("--rmm-track-allocations/--no-rmm-track-allocations",), dict(
        default=False, show_default=True, help="Track RMM's allocations (for the dashboard).")),
    (("--pre-import",), dict(default=None, help="Modules each worker imports at start (a,b).")),
    (("--enable-tcp-over-ucx/--disable-tcp-over-ucx",), dict(default=None, help="UCX transport: TCP.")),
    (("--enable-infiniband/--disable-infiniband",), dict(default=None, help="UCX transport: InfiniBand.")),
    (("--enable-nvlink/--disable-nvlink",), dict(default=None, help="UCX transport: NVLink.")),
    (("--enable-rdmacm/--disable-rdmacm",), dict(default=None, help="UCX: RDMA connection manager.")),
    (("--cpu-affinity/--no-cpu-affinity",), dict(default=True, show_default=True, help=(
        "Pin each worker to the CPU cores near its GPU (within the allowed cpuset)."))),
)
GPU_OPTION_NAMES = _NAMES = ("device_memory_limit", "enable_cudf_spill", "cudf_spill_stats", "rmm_pool_size",
          "rmm_maximum_pool_size", "rmm_managed_memory", "rmm_async",
          "rmm_allocator_external_lib_list", "rmm_release_threshold", "rmm_log_directory",
          "rmm_track_allocations", "pre_import", "enable_tcp_over_ucx", "enable_infiniband",
          "enable_nvlink", "enable_rdmacm", "cpu_affinity")
_DEFAULTS = {name: settings["default"] for name, (_, settings) in zip(_NAMES, GPU_FLAGS)}


#: the UCX transport switches (the batch entry points turn them into ``transports``:
#: :mod:`hpcgpu.jobspec.gpukeywords`)
TRANSPORT_FLAGS = ("enable_tcp_over_ucx", "enable_infiniband", "enable_nvlink", "enable_rdmacm")


def gpu_flags(command: Callable | None = None, *, transports: bool = True) -> Callable:
    """Decorate a click command with :data:`GPU_FLAGS` (without the transport switches
    when ``transports`` is False)."""
    def decorate(command: Callable) -> Callable:
        for name, (decls, settings) in reversed(list(zip(_NAMES, GPU_FLAGS))):
            if transports or name not in TRANSPORT_FLAGS:
                command = click.option(*decls, **settings)(command)
        return command

    return decorate if command is None else decorate(command)


def _none_words(value: Any) -> Any:
    return None if isinstance(value, str) and value.strip().lower() in ("none", "null") else value


def options_from_flags(values: dict[str, Any]) -> GPUWorkerOptions:
    """The options from parsed flags (others in ``values`` are ignored); only flags that
    differ from their default count as given (dask-cuda's meaning of RMM then applies).

    Examples
    --------
    >>> options_from_flags({"rmm_pool_size": "2GB", "rmm_async": False, "nthreads": 4}).rmm_pool_size
    '2GB'
    >>> options_from_flags({"rmm_pool_size": "none"}).rmm_pool_size is None
    True
    >>> options_from_flags({"rmm_async": True}).hpcgpu_pool
    False
    """
    return GPUWorkerOptions.from_dask_cuda(**given_flags(values))


def given_flags(values: dict[str, Any]) -> dict[str, Any]:
    """The GPU flags in ``values`` that differ from their default, as keywords (``none``
    as None).

    >>> given_flags({"rmm_pool_size": "none", "rmm_async": False, "nthreads": 4})
    {'rmm_pool_size': None}
    """
    return {name: _none_words(values[name]) for name in _NAMES
            if name in values and values[name] != _DEFAULTS[name]}


def flag_argv(options: GPUWorkerOptions) -> list[str]:
    """The flags that give ``options`` to an entry point with :func:`gpu_flags`.

    Examples
    --------
    >>> flag_argv(GPUWorkerOptions.from_dask_cuda(rmm_pool_size="2GB", enable_nvlink=False))
    ['--rmm-pool-size', '2GB', '--disable-nvlink']
    >>> options_from_flags(dict(zip(_NAMES, [_DEFAULTS[n] for n in _NAMES]))) == GPUWorkerOptions()
    True
    """
    argv: list[str] = []
    for name, (decls, _) in zip(_NAMES, GPU_FLAGS):
        value = getattr(options, name)
        if name == "rmm_pool_size" and value == "auto":
            continue
        if value == _DEFAULTS[name] and not (name == "rmm_pool_size" and value is None):
            continue
        if "/" in decls[0]:  # a boolean switch: --on/--off
            on, off = decls[0].split("/")
            argv.append(on if value else off)
        else:
            text = "none" if value is None else ",".join(value) if isinstance(value, tuple) else str(value)
            argv += [decls[0], text]
    return argv
