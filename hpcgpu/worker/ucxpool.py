"""UCX's receive buffers come from the worker's RMM pool, not from a second pool.

distributed-ucxx allocates each received CUDA frame with ``rmm.DeviceBuffer``, that is
from RMM's current device resource: the worker's own pool once :func:`setup_rmm` made
it. Its ``distributed-ucxx.rmm.pool-size`` option (``DASK_DISTRIBUTED_UCXX__RMM__POOL_SIZE``)
instead calls ``rmm.reinitialize`` with a pool of that size when UCX starts, after the
worker's pool (``rmm_pool_size="auto"``: 90 % of the GPU) has taken the memory: on a
4 x H200 host every worker died with "Maximum pool size exceeded (failed to allocate
16.000000 GiB)". Where the worker owns a pool, hpcgpu therefore lets UCX use it and
says so in the worker's log; without one (``rmm_pool_size="none"``) UCX's option stays.
"""

from __future__ import annotations

import logging

import dask

__all__ = ["UCX_POOL_KEYS", "ucx_pool_size", "let_ucx_use_the_worker_pool"]

logger = logging.getLogger("distributed.hpcgpu")

#: distributed-ucxx's key and the legacy one it still reads (distributed_ucxx.config.get_rmm_config).
UCX_POOL_KEYS = ("distributed-ucxx.rmm.pool-size", "distributed.rmm.pool-size")


def ucx_pool_size() -> str | None:
    """The RMM pool size that distributed-ucxx would make when it starts, if any.

    Examples
    --------
    >>> with dask.config.set({"distributed-ucxx.rmm.pool-size": "16GiB"}):
    ...     ucx_pool_size()
    '16GiB'
    """
    for key in UCX_POOL_KEYS:
        value = dask.config.get(key, default=None)
        if value is not None:
            return str(value)
    return None


def let_ucx_use_the_worker_pool(allocator: str | None) -> str | None:
    """Drop distributed-ucxx's own pool in this process when ``allocator`` is an RMM pool.

    Returns the dropped size (for the worker's metadata) or None.

    Examples
    --------
    >>> with dask.config.set({"distributed-ucxx.rmm.pool-size": "16GiB"}):
    ...     let_ucx_use_the_worker_pool("rmm-pool (1024 bytes)"), ucx_pool_size()
    ('16GiB', None)
    >>> with dask.config.set({"distributed-ucxx.rmm.pool-size": "16GiB"}):
    ...     let_ucx_use_the_worker_pool("cupy-pool (rmm_pool_size=none)"), ucx_pool_size()
    (None, '16GiB')
    """
    size = ucx_pool_size()
    if size is None or not (allocator or "").startswith(("rmm-pool", "rmm-async")):
        return None
    dask.config.set({key: None for key in UCX_POOL_KEYS})
    logger.info("distributed-ucxx.rmm.pool-size=%s ignored: UCX receives into this worker's "
                "RMM pool (%s); set the worker's rmm_pool_size to size it", size, allocator)
    return size
