"""``LocalCUDACluster``'s and ``LocalCluster``'s keywords, sorted for ``LocalGPUCluster``.

Pure functions: which keyword goes to the scheduler, to each worker's nanny, to
``SpecCluster``, or into the workers' :class:`~hpcgpu.jobspec.gpuoptions.GPUWorkerOptions`,
with the checks dask-cuda and distributed make, raised before anything starts.
"""

from __future__ import annotations

import warnings
from typing import Any

from hpcgpu.jobspec.gpuoptions import DASK_CUDA_WORKER_KEYWORDS, GPUWorkerOptions

__all__ = ["split_local_kwargs", "gpu_options", "ucx_protocol", "same_host_protocol", "nanny_and_worker_class",
           "CLUSTER_KEYWORDS", "SCHEDULER_KEYWORDS"]

#: LocalCluster's keywords that are SpecCluster's
CLUSTER_KEYWORDS = ("name", "loop", "scheduler_sync_interval", "shutdown_on_close")
#: LocalCluster's keywords that go to the scheduler (as the scheduler's option name)
SCHEDULER_KEYWORDS = {"scheduler_port": "port", "services": "services",
                      "service_kwargs": "service_kwargs", "blocked_handlers": "blocked_handlers"}


def split_local_kwargs(kwargs: dict[str, Any]) -> tuple[dict, dict, dict]:
    """``(scheduler options, worker options, SpecCluster keywords)`` from the keywords
    ``LocalCluster`` takes besides those ``LocalGPUCluster`` names; the rest are worker
    (nanny) options, as ``LocalCluster``'s ``**worker_kwargs``.

    Examples
    --------
    >>> split_local_kwargs({"scheduler_port": 0, "worker_dashboard_address": ":0", "name": "c",
    ...                     "death_timeout": 30, "scheduler_kwargs": {"idle_timeout": 60}})
    ({'port': 0, 'idle_timeout': 60}, {'dashboard_address': ':0', 'dashboard': True, 'death_timeout': 30}, {'name': 'c'})
    >>> split_local_kwargs({"processes": False})
    Traceback (most recent call last):
    ...
    ValueError: processes=False: each GPU needs its own worker process (as in dask-cuda); leave processes out
    """
    rest = dict(kwargs)
    if rest.pop("processes", True) is False:
        raise ValueError("processes=False: each GPU needs its own worker process (as in dask-cuda); "
                         "leave processes out")
    if "ip" in rest:
        warnings.warn("The `ip` parameter has been deprecated. Please use `host` instead",
                      DeprecationWarning, stacklevel=3)
        rest.setdefault("host", rest.pop("ip"))
    if rest.pop("start", None) is not None:
        warnings.warn("The `start` parameter has been deprecated and has no effect.",
                      DeprecationWarning, stacklevel=3)
    rest.pop("diagnostics_port", None)  # LocalCluster accepts it and ignores it too
    scheduler = {SCHEDULER_KEYWORDS[k]: rest.pop(k) for k in list(rest) if k in SCHEDULER_KEYWORDS}
    scheduler.update(rest.pop("scheduler_kwargs", None) or {})
    cluster = {k: rest.pop(k) for k in CLUSTER_KEYWORDS if k in rest}
    worker: dict[str, Any] = {}
    if "worker_dashboard_address" in rest:
        address = rest.pop("worker_dashboard_address")
        worker.update(dashboard_address=address, dashboard=address is not None)
    if "worker_services" in rest:
        worker["services"] = rest.pop("worker_services")
    worker.update(rest)
    return scheduler, worker, cluster


def gpu_options(values: dict[str, Any]) -> GPUWorkerOptions:
    """The workers' GPU options from ``LocalCUDACluster``'s keywords; those equal to their
    default count as not given (dask-cuda's RMM meaning applies once one ``rmm_*`` is given).

    Examples
    --------
    >>> gpu_options({"rmm_pool_size": "auto", "rmm_managed_memory": True}).rmm_pool_size is None
    True
    >>> gpu_options({"rmm_pool_size": "auto", "device_memory_limit": "default"}) == GPUWorkerOptions()
    True
    """
    defaults = GPUWorkerOptions()

    def changed(k: str, v: Any) -> bool:  # 1.0 is not the default True, nor 0 the default False
        return v != getattr(defaults, k) or type(v) is not type(getattr(defaults, k))

    given = {k: v for k, v in values.items() if k in DASK_CUDA_WORKER_KEYWORDS and changed(k, v)}
    return GPUWorkerOptions.from_dask_cuda(**given)


def ucx_protocol(protocol: str | None, options: GPUWorkerOptions) -> str | None:
    """The protocol, as dask-cuda picks it: UCX when a transport is switched on.

    Examples
    --------
    >>> ucx_protocol(None, GPUWorkerOptions(enable_tcp_over_ucx=True))
    'ucx'
    >>> ucx_protocol("tcp", GPUWorkerOptions(enable_nvlink=True))
    Traceback (most recent call last):
    ...
    TypeError: enable_nvlink=True (or InfiniBand, TCP over UCX) needs protocol='ucx', not 'tcp'
    """
    if options.enable_tcp_over_ucx or options.enable_infiniband or options.enable_nvlink:
        if protocol is None:
            return "ucx"
        if protocol.split("://")[0] not in ("ucx", "ucxx"):
            raise TypeError(f"enable_nvlink={options.enable_nvlink} (or InfiniBand, TCP over UCX) "
                            f"needs protocol='ucx', not {protocol!r}")
    return protocol


def same_host_protocol(protocol: str | None, security, host: str | None, interface: str | None) -> str | None:
    """The workers' and nannies' protocol: ``unix`` (:mod:`hpcgpu.network.unixcomm`) for a
    TLS cluster that nobody asked to reach over the network, else ``protocol``. The
    scheduler keeps its TLS listener for clients; between the cluster's own processes the
    kernel checks the user instead of a certificate, at TCP's speed.

    Examples
    --------
    >>> same_host_protocol(None, security=True, host=None, interface=None)
    'unix'
    >>> same_host_protocol("tls", security=True, host=None, interface=None)
    'tls'
    >>> same_host_protocol(None, security=True, host="0.0.0.0", interface=None) is None
    True
    >>> same_host_protocol(None, security=None, host=None, interface=None) is None
    True
    """
    if protocol is None and security and host is None and interface is None:
        return "unix"
    return protocol


def nanny_and_worker_class(worker_class: Any, default_worker: type, log_spilling: bool) -> tuple[type, type]:
    """``(nanny class, worker class)`` for ``worker_class`` as dask-cuda takes it: a
    ``Nanny`` subclass is the nanny, a ``Worker`` subclass runs inside a ``Nanny``.

    Examples
    --------
    >>> from distributed import Nanny, Worker
    >>> nanny_and_worker_class(None, Worker, False) == (Nanny, Worker)
    True
    >>> nanny_and_worker_class(Worker, Worker, True)
    Traceback (most recent call last):
    ...
    ValueError: log_spilling=True cannot be combined with worker_class (as in dask-cuda): leave one out
    """
    from distributed import Nanny

    if worker_class is None:
        return Nanny, default_worker
    if log_spilling:
        raise ValueError("log_spilling=True cannot be combined with worker_class (as in dask-cuda): "
                         "leave one out")
    if isinstance(worker_class, type) and issubclass(worker_class, Nanny):
        return worker_class, default_worker
    return Nanny, worker_class
