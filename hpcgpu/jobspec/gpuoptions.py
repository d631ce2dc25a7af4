"""The GPU options of a worker, in dask-cuda's vocabulary: one value, parsed once.

:class:`GPUWorkerOptions` holds what ``LocalCUDACluster`` and ``dask cuda worker`` take
for each worker's GPU (RMM, spilling, cuDF spilling, pre-imports, UCX transports) with
dask-cuda's meanings, plus hpcgpu's own default RMM pool (``rmm_pool_size="auto"``).
:class:`~hpcgpu.cluster.local.LocalGPUCluster`, ``hpcgpu worker`` and the batch entry
point ``python -m hpcgpu.worker`` all build it; it travels to the worker process as one
environment variable (:data:`ENV_VARIABLE`, JSON) and :mod:`hpcgpu.worker.gpuworker`
applies it there, with dask-cuda's own plugins where a GPU and dask-cuda are present.
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping

from dask.utils import parse_bytes

from hpcgpu.jobspec.devices import parse_cuda_visible_devices

__all__ = ["GPUWorkerOptions", "ENV_VARIABLE", "RMM_KEYWORDS", "DASK_CUDA_WORKER_KEYWORDS",
           "check_device_bytes", "comma_list", "parse_cuda_visible_devices", "ucx_transport_config"]

#: the variable that carries the options into the worker process (the nanny hands it down)
ENV_VARIABLE = "HPCGPU_WORKER_OPTIONS"
#: dask-cuda's RMM keywords: giving any of them selects dask-cuda's meaning of RMM
RMM_KEYWORDS = ("rmm_pool_size", "rmm_maximum_pool_size", "rmm_managed_memory", "rmm_async",
                "rmm_allocator_external_lib_list", "rmm_release_threshold", "rmm_log_directory",
                "rmm_track_allocations")
#: the keywords of ``LocalCUDACluster`` that :meth:`GPUWorkerOptions.from_dask_cuda` takes
DASK_CUDA_WORKER_KEYWORDS = ("device_memory_limit", "enable_cudf_spill", "cudf_spill_stats",
                             *RMM_KEYWORDS, "log_spilling", "pre_import", "enable_tcp_over_ucx",
                             "enable_infiniband", "enable_nvlink", "enable_rdmacm", "cpu_affinity")
_EXTERNAL_LIBS = ("cupy", "torch")


def check_device_bytes(value: Any, field: str, special: tuple[str, ...] = ()) -> None:
    """Refuse a device size dask-cuda could not parse: bytes, a size string, a fraction.

    Examples
    --------
    >>> check_device_bytes("40GB", "rmm_pool_size"); check_device_bytes(0.5, "x"); check_device_bytes(None, "x")
    >>> check_device_bytes("lots", "rmm_pool_size")
    Traceback (most recent call last):
    ...
    ValueError: rmm_pool_size='lots' is not a size: give bytes (40000000000), a size ('40GB'), a fraction of the device's memory (0.9) or None
    """
    if value is None or (isinstance(value, str) and value in special):
        return
    problem = isinstance(value, bool)
    if not problem and isinstance(value, (int, float)):
        problem = value < 0 or (isinstance(value, float) and value > 1 and not value.is_integer())
    elif not problem:
        try:
            problem = parse_bytes(str(value)) < 0
        except (ValueError, TypeError):
            problem = True
    if problem:
        also = "".join(f", {s!r}" for s in special)
        raise ValueError(f"{field}={value!r} is not a size: give bytes (40000000000), a size "
                         f"('40GB'), a fraction of the device's memory (0.9){also} or None")


def comma_list(value: Any, field: str, choices: tuple[str, ...] | None = None) -> tuple[str, ...] | None:
    """``"cudf,rmm"`` or ``["cudf", "rmm"]`` as a tuple (dask-cuda's two forms).

    Examples
    --------
    >>> comma_list("torch, cupy", "rmm_allocator_external_lib_list", ("cupy", "torch"))
    ('torch', 'cupy')
    >>> comma_list(None, "pre_import") is None
    True
    >>> comma_list("jax", "rmm_allocator_external_lib_list", ("cupy", "torch"))
    Traceback (most recent call last):
    ...
    ValueError: rmm_allocator_external_lib_list: 'jax' is not one of 'cupy', 'torch'
    """
    if value is None:
        return None
    if isinstance(value, str):
        items = [v.strip() for v in value.split(",") if v.strip()]
    elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        items = [v.strip() for v in value]
    else:
        raise ValueError(f"{field}={value!r} must be a comma-separated string ('a,b') or a "
                         "list of strings (['a', 'b'])")
    for item in items:
        if choices is not None and item not in choices:
            raise ValueError(f"{field}: {item!r} is not one of {', '.join(map(repr, choices))}")
    return tuple(items)


def ucx_transport_config(tcp: bool | None, infiniband: bool | None, nvlink: bool | None,
                         rdmacm: bool | None) -> dict[str, bool | None]:
    """distributed-ucxx's switches for dask-cuda's ``enable_*`` flags (dask-cuda's rule:
    disabling some and enabling none enables the others).

    Examples
    --------
    >>> ucx_transport_config(None, None, None, None)["distributed-ucxx.cuda-copy"] is None
    True
    >>> c = ucx_transport_config(None, False, None, None)
    >>> c["distributed-ucxx.tcp"], c["distributed-ucxx.infiniband"], c["distributed-ucxx.nvlink"]
    (True, False, True)
    """
    opts = (tcp, infiniband, nvlink)
    if any(o is False for o in opts) and not any(o is True for o in opts):
        tcp, infiniband, nvlink = (True if o is None else o for o in opts)
    return {"distributed-ucxx.tcp": tcp, "distributed-ucxx.infiniband": infiniband,
            "distributed-ucxx.nvlink": nvlink, "distributed-ucxx.rdmacm": rdmacm,
            "distributed-ucxx.cuda-copy": True if (tcp or infiniband or nvlink) else None}


@dataclass(frozen=True)
class GPUWorkerOptions:
    """What each worker process sets up on its GPU (dask-cuda's keywords and meanings).

    Attributes
    ----------
    device_memory_limit : int, float, str or None
        Spill from device to host memory beyond this (dask-cuda's DeviceHostFile):
        ``"default"`` 80 % of the device, ``"auto"`` all of it, bytes, a size, a fraction,
        ``0``/None no device spilling.
    enable_cudf_spill, cudf_spill_stats : bool, int
        cuDF's own spilling and its statistics level.
    rmm_pool_size : int, float, str or None
        ``"auto"`` (hpcgpu's default, used when no ``rmm_*`` option is given): an RMM pool
        of 90 % of the device memory free at start, with CuPy's pool drawing from it.
        Anything else has dask-cuda's meaning: a pool of that size (None: no pool), and
        CuPy keeps its own allocator unless ``rmm_allocator_external_lib_list`` names it.
    rmm_maximum_pool_size, rmm_managed_memory, rmm_async, rmm_release_threshold,
    rmm_log_directory, rmm_track_allocations, rmm_allocator_external_lib_list
        As dask-cuda's ``RMMSetup``.
    log_spilling : bool
        Accepted for dask-cuda's signature (dask-cuda 26.10 logs nothing more with it).
    pre_import : tuple of str or None
        Modules each worker imports before it takes tasks.
    enable_tcp_over_ucx, enable_infiniband, enable_nvlink, enable_rdmacm : bool or None
        UCX transports (None: UCX chooses).
    cpu_affinity : bool
        Pin the worker to the CPU cores near its GPU (within the allowed cpuset).

    Examples
    --------
    >>> o = GPUWorkerOptions.from_dask_cuda(rmm_pool_size="2GB", pre_import="cudf,rmm")
    >>> o.rmm_pool_size, o.pre_import, o.hpcgpu_pool
    ('2GB', ('cudf', 'rmm'), False)
    >>> GPUWorkerOptions.from_env(o.to_env()) == o
    True
    >>> GPUWorkerOptions().hpcgpu_pool, GPUWorkerOptions.from_dask_cuda(rmm_async=True).rmm_pool_size is None
    (True, True)
    >>> GPUWorkerOptions(rmm_pool_size="none").rmm_pool_size is None
    True
    """

    device_memory_limit: int | float | str | None = "default"
    enable_cudf_spill: bool = False
    cudf_spill_stats: int = 0
    rmm_pool_size: int | float | str | None = "auto"
    rmm_maximum_pool_size: int | float | str | None = None
    rmm_managed_memory: bool = False
    rmm_async: bool = False
    rmm_allocator_external_lib_list: tuple[str, ...] | None = None
    rmm_release_threshold: int | float | str | None = None
    rmm_log_directory: str | None = None
    rmm_track_allocations: bool = False
    log_spilling: bool = False
    pre_import: tuple[str, ...] | None = None
    enable_tcp_over_ucx: bool | None = None
    enable_infiniband: bool | None = None
    enable_nvlink: bool | None = None
    enable_rdmacm: bool | None = None
    cpu_affinity: bool = True

    def __post_init__(self) -> None:
        for name in ("device_memory_limit", "rmm_pool_size", "rmm_maximum_pool_size", "rmm_release_threshold"):
            value = getattr(self, name)
            if isinstance(value, str) and value.strip().lower() in ("none", "null"):
                object.__setattr__(self, name, None)  # the command line's spelling of None
        check_device_bytes(self.device_memory_limit, "device_memory_limit", ("default", "auto"))
        check_device_bytes(self.rmm_pool_size, "rmm_pool_size", ("auto",))
        check_device_bytes(self.rmm_maximum_pool_size, "rmm_maximum_pool_size")
        check_device_bytes(self.rmm_release_threshold, "rmm_release_threshold")
        if not isinstance(self.cudf_spill_stats, int) or isinstance(self.cudf_spill_stats, bool) \
                or self.cudf_spill_stats < 0:
            raise ValueError(f"cudf_spill_stats={self.cudf_spill_stats!r} must be a whole number >= 0")
        for name in ("rmm_allocator_external_lib_list", "pre_import"):
            value = getattr(self, name)
            if value is not None:
                choices = _EXTERNAL_LIBS if name.startswith("rmm") else None
                object.__setattr__(self, name, comma_list(value, name, choices))
        self._check_combinations()

    def _check_combinations(self) -> None:
        # dask-cuda's RMMSetup and CUDAWorker refuse these; here they fail before any start
        if self.rmm_async and self.rmm_managed_memory:
            raise ValueError("rmm_managed_memory=True is incompatible with rmm_async=True: choose one")
        if self.rmm_release_threshold is not None and not self.rmm_async:
            raise ValueError("rmm_release_threshold needs rmm_async=True (it is the async "
                             "allocator's release threshold)")
        if self.rmm_maximum_pool_size is not None and self.rmm_pool_size in (None, "auto") \
                and not self.rmm_async:
            raise ValueError("rmm_maximum_pool_size needs rmm_pool_size (the pool's initial "
                             "size) or rmm_async=True")
        others = [k for k in RMM_KEYWORDS[1:] if k != "rmm_async" and getattr(self, k) != _default(k)]
        if self.rmm_pool_size == "auto" and others:
            raise ValueError(f"rmm_pool_size='auto' (hpcgpu's pool) takes no {', '.join(others)}: "
                             "give the pool's size (dask-cuda's meaning) or leave rmm_pool_size out")
        if self.enable_nvlink and self.rmm_managed_memory:
            raise ValueError("rmm_managed_memory=True is incompatible with enable_nvlink=True")
        if self.enable_rdmacm and self.enable_infiniband is False:
            raise ValueError("enable_rdmacm=True needs InfiniBand: drop enable_infiniband=False")

    @property
    def hpcgpu_pool(self) -> bool:
        """True where hpcgpu's default allocator applies (no dask-cuda RMM option given)."""
        return self.rmm_pool_size == "auto"

    @property
    def ucx_transports_given(self) -> bool:
        """Whether any ``enable_*`` transport switch was set."""
        return any(v is not None for v in (self.enable_tcp_over_ucx, self.enable_infiniband,
                                           self.enable_nvlink, self.enable_rdmacm))

    def ucx_config(self) -> dict[str, bool | None]:
        """The ``distributed-ucxx.*`` dask config for the transport switches (empty if none)."""
        if not self.ucx_transports_given:
            return {}
        return ucx_transport_config(self.enable_tcp_over_ucx, self.enable_infiniband,
                                    self.enable_nvlink, self.enable_rdmacm)

    @classmethod
    def from_dask_cuda(cls, **kwargs: Any) -> "GPUWorkerOptions":
        """From ``LocalCUDACluster``'s keywords (only those given): dask-cuda's meanings.

        Giving any ``rmm_*`` keyword without ``rmm_pool_size`` means dask-cuda's default
        pool (None), not hpcgpu's ``"auto"``.
        """
        unknown = set(kwargs) - set(DASK_CUDA_WORKER_KEYWORDS)
        if unknown:
            raise TypeError(f"unknown GPU worker option(s): {', '.join(sorted(unknown))}")
        rmm_given = any(kwargs.get(k, _default(k)) != _default(k) for k in RMM_KEYWORDS[1:])
        if "rmm_pool_size" not in kwargs and rmm_given:
            kwargs["rmm_pool_size"] = None
        if kwargs.get("rmm_async") and kwargs.get("rmm_pool_size") not in (None, "auto"):
            warnings.warn("'rmm_pool_size' is not needed when 'rmm_async' is enabled and will "
                          "raise an exception in the future. Remove the 'rmm_pool_size' "
                          "argument to silence this warning.", FutureWarning, stacklevel=3)
        return cls(**kwargs)

    def to_env(self) -> dict[str, str]:
        """``{ENV_VARIABLE: json}``: the options for the worker process's environment."""
        return {ENV_VARIABLE: json.dumps(asdict(self), sort_keys=True)}

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> "GPUWorkerOptions":
        """The options the cluster or entry point set (the defaults where none)."""
        env = os.environ if env is None else env
        text = env.get(ENV_VARIABLE)
        if not text:
            return cls()
        values = json.loads(text)
        known = {f.name for f in fields(cls)}
        for name in ("rmm_allocator_external_lib_list", "pre_import"):
            if values.get(name) is not None:
                values[name] = tuple(values[name])
        return cls(**{k: v for k, v in values.items() if k in known})


def _default(name: str) -> Any:
    return next(f.default for f in fields(GPUWorkerOptions) if f.name == name)
