"""Communication settings: TCP, TLS or UCX (distributed-ucxx), transports, interfaces.

One frozen value, :class:`NetworkSettings`, and pure functions that turn it into what
the scheduler, the workers and the client each need. See ``docs/networking.md``.

Examples
--------
>>> from hpcgpu.network import NetworkSettings, resolve, worker_options, job_environment
>>> net = NetworkSettings.create("ucx", transports="infiniband,nvlink",
...                              scheduler_interface="eth0", worker_interface="ib0")
>>> worker_options(net)
{'protocol': 'ucx', 'interface': 'ib0'}
>>> job_environment(net)[0]
('DASK_DISTRIBUTED_UCXX__TCP', 'True')
"""

from __future__ import annotations

from hpcgpu.network.availability import (
    INSTALL_HINT,
    UCXFallbackWarning,
    UCXUnavailableError,
    resolve,
    ucx_unavailable_reason,
)
from hpcgpu.network.config import (
    ROLES,
    client_address,
    config_context,
    dask_config,
    job_environment,
    scheduler_options,
    ucx_flags,
    ucx_variables,
    worker_options,
)
from hpcgpu.network.settings import (
    FALLBACK_PROTOCOLS,
    PROTOCOLS,
    TRANSPORTS,
    UCX_PROTOCOLS,
    NetworkSettings,
)

__all__ = [
    "NetworkSettings", "PROTOCOLS", "TRANSPORTS", "UCX_PROTOCOLS", "FALLBACK_PROTOCOLS", "ROLES",
    "resolve", "ucx_unavailable_reason", "UCXUnavailableError", "UCXFallbackWarning",
    "INSTALL_HINT", "ucx_flags", "ucx_variables", "dask_config", "config_context",
    "job_environment", "worker_options", "scheduler_options", "client_address",
]
