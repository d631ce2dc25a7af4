"""dask-cuda's worker keywords on the batch entry points: ``SLURMCluster`` & co., ``hpcgpu
run`` and ``GPURunner``.

The keywords are ``LocalCUDACluster``'s (:data:`~hpcgpu.jobspec.gpuoptions.DASK_CUDA_WORKER_KEYWORDS`),
parsed into one :class:`~hpcgpu.jobspec.gpuoptions.GPUWorkerOptions` before anything is
submitted and rendered as the worker command's flags (:func:`hpcgpu.jobspec.gpuflags.flag_argv`:
the flags ``python -m hpcgpu.worker`` and ``hpcgpu worker`` parse). The UCX transport switches
(``enable_tcp_over_ucx``, ``enable_infiniband``, ``enable_nvlink``, ``enable_rdmacm``) become the
network's ``transports`` instead, which scheduler, workers and client share.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from hpcgpu.jobspec.gpuoptions import DASK_CUDA_WORKER_KEYWORDS, GPUWorkerOptions, ucx_transport_config
from hpcgpu.jobspec.scriptfields import single_line

__all__ = ["GPU_KEYWORDS", "SWITCHES", "explicit_none", "batch_gpu_options", "switch_transports",
           "switch_network"]

#: the keywords the batch entry points take (those of LocalCUDACluster's workers)
GPU_KEYWORDS = DASK_CUDA_WORKER_KEYWORDS
#: dask-cuda's UCX transport switch -> hpcgpu's transport name
SWITCHES = {"enable_tcp_over_ucx": "tcp", "enable_infiniband": "infiniband",
            "enable_nvlink": "nvlink", "enable_rdmacm": "rdmacm"}
#: keywords whose None differs from their default (None: no pool, no device spilling)
_NONE_MEANS = ("device_memory_limit", "rmm_pool_size")


def explicit_none(options: dict[str, Any]) -> dict[str, Any]:
    """``options`` with an explicit ``rmm_pool_size=None`` / ``device_memory_limit=None`` as
    ``"none"``: the configuration layers read None as "not given", dask-cuda as "no pool",
    "no spilling".

    >>> explicit_none({"rmm_pool_size": None, "queue": None})
    {'rmm_pool_size': 'none', 'queue': None}
    """
    return {k: "none" if v is None and k in _NONE_MEANS else v for k, v in options.items()}


def _changed(name: str, value: Any, defaults: GPUWorkerOptions) -> bool:
    default = getattr(defaults, name)
    return value != default or type(value) is not type(default)


def batch_gpu_options(values: dict[str, Any]) -> tuple[GPUWorkerOptions | None, GPUWorkerOptions]:
    """``(worker options, all options)`` from the keywords given in ``values`` (others
    ignored; None is an explicit None: no pool, no device spilling).

    The worker options, without the UCX switches (:func:`switch_network` turns those into
    the network's transports), are None when no other keyword differs from its default:
    the job script stays as it was. ``ValueError`` names the keyword and the fix.

    Examples
    --------
    >>> worker, both = batch_gpu_options({"rmm_pool_size": "2GB", "enable_nvlink": True, "queue": "q"})
    >>> worker.rmm_pool_size, worker.enable_nvlink, both.enable_nvlink
    ('2GB', None, True)
    >>> batch_gpu_options({"device_memory_limit": "default", "rmm_pool_size": "auto"})[0] is None
    True
    >>> batch_gpu_options({"rmm_pool_size": None})[0].rmm_pool_size is None
    True
    >>> batch_gpu_options({"rmm_pool_size": "lots"})
    Traceback (most recent call last):
    ...
    ValueError: rmm_pool_size='lots' is not a size: give bytes (40000000000), a size ('40GB'), \
a fraction of the device's memory (0.9), 'auto' or None
    """
    defaults, given = GPUWorkerOptions(), {}
    for name, value in values.items():
        if isinstance(value, str) and value.strip().lower() in ("none", "null"):
            value = None  # the configuration's and the command line's spelling
        if name in GPU_KEYWORDS and (name in _NONE_MEANS if value is None else _changed(name, value, defaults)):
            given[name] = value
    try:
        options = GPUWorkerOptions.from_dask_cuda(**given)
    except TypeError as error:  # a bool where a number belongs, say
        raise ValueError(str(error)) from None
    if options.rmm_log_directory is not None:
        single_line("rmm_log_directory", options.rmm_log_directory)
    for module in options.pre_import or ():
        single_line("pre_import", module)
    if not any(k not in SWITCHES for k in given):
        return None, options
    return dataclasses.replace(options, **{k: None for k in SWITCHES}), options


def switch_transports(options: GPUWorkerOptions) -> str | None:
    """The ``transports`` (hpcgpu's names, comma-separated) for dask-cuda's switches, by
    dask-cuda's rule (switching some off and none on switches the others on); None when
    no switch is given.

    Examples
    --------
    >>> switch_transports(GPUWorkerOptions(enable_infiniband=True, enable_rdmacm=True))
    'infiniband,rdmacm'
    >>> switch_transports(GPUWorkerOptions(enable_nvlink=False))
    'infiniband,tcp'
    >>> switch_transports(GPUWorkerOptions()) is None
    True
    """
    if not options.ucx_transports_given:
        return None
    config = ucx_transport_config(options.enable_tcp_over_ucx, options.enable_infiniband,
                                  options.enable_nvlink, options.enable_rdmacm)
    chosen = sorted(name for name in SWITCHES.values() if config[f"distributed-ucxx.{name}"])
    if not chosen:
        raise ValueError("the enable_* switches leave no UCX transport on: switch one on, "
                         "e.g. enable_tcp_over_ucx=True, or leave them out (UCX chooses)")
    return ",".join(chosen)


def switch_network(protocol: str | None, transports: str | None,
                   options: GPUWorkerOptions) -> tuple[str | None, str | None]:
    """``(protocol, transports)`` with dask-cuda's UCX switches in ``options``: a switch
    on means UCX (as ``LocalCUDACluster`` picks it); switches off without UCX change
    nothing, as in dask-cuda. ``transports`` is the one asked for (they must agree).

    Examples
    --------
    >>> switch_network(None, "auto", GPUWorkerOptions(enable_nvlink=True))
    ('ucx', 'nvlink')
    >>> switch_network("tls", None, GPUWorkerOptions(enable_nvlink=False))
    ('tls', None)
    >>> switch_network("tls", None, GPUWorkerOptions(enable_nvlink=True))
    Traceback (most recent call last):
    ...
    ValueError: enable_nvlink=True needs protocol='ucx', not 'tls': give protocol='ucx' or leave protocol out
    """
    chosen = switch_transports(options)
    if chosen is None:
        return protocol, transports
    on = [k for k in SWITCHES if k != "enable_rdmacm" and getattr(options, k)]
    ucx = protocol is not None and protocol.split("://")[0] in ("ucx", "ucxx")
    if not on and not ucx:
        return protocol, transports
    if on and protocol is not None and not ucx:
        raise ValueError(f"{on[0]}=True needs protocol='ucx', not {protocol!r}: give "
                         "protocol='ucx' or leave protocol out")
    asked = transports.split(",") if isinstance(transports, str) else list(transports or ())
    if transports not in (None, "auto") and sorted(t.strip() for t in asked) != chosen.split(","):
        raise ValueError(f"transports={transports!r} and the enable_* switches ({chosen!r}) "
                         "both choose UCX transports: give one of them")
    return protocol or "ucx", chosen
