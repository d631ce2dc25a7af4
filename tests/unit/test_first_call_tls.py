"""The first call to a TLS worker costs what later ones do: the worker builds tornado's default
TLS context before it registers, not when it accepts its first connection (the scheduler's
first call to it: ``client.run``, ``gather``, another worker's fetch), and LocalGPUCluster's
scheduler opens its connection to each worker when the worker arrives."""

from __future__ import annotations

import asyncio
import time

import pytest
from distributed import Scheduler, Worker
from tornado.netutil import _client_ssl_defaults

from hpcgpu import LocalGPUCluster
from hpcgpu.network.tls import temporary_security


async def _start_worker(protocol: str) -> tuple[int, int]:
    """``(hits, misses)`` of tornado's default client TLS context over a scheduler and an
    hpcgpu-preloaded worker started in this process, counted from nothing."""
    security = temporary_security() if protocol == "tls" else None
    listen = dict(protocol=f"{protocol}://", host="127.0.0.1", security=security)
    _client_ssl_defaults.cache_clear()  # a cache: what is dropped is built again when needed
    async with Scheduler(port=0, dashboard=False, **listen) as scheduler:
        async with Worker(scheduler.address, preload=["hpcgpu.worker.preload"], nthreads=1, **listen):
            info = _client_ssl_defaults.cache_info()
    return info.hits, info.misses


@pytest.mark.parametrize("protocol", ["tls", "tcp"])
def test_worker_builds_tornado_tls_context_before_it_registers(protocol):
    # tornado builds the context (the system's CA bundle: ~20 ms of CPU) in the first TLS
    # connection a process accepts. The preload builds it first, so the scheduler's accept
    # of the worker's registration finds it; without the preload that accept builds it
    # (one miss, no hit), as a worker process's first accept did in its first client.run.
    hits, misses = asyncio.run(_start_worker(protocol))
    if protocol == "tls":
        assert misses == 1 and hits >= 1, (hits, misses)
    else:
        assert (hits, misses) == (0, 0)


async def _pooled_after_arrival(timeout: float = 10.0) -> int:
    """Connections to a new worker in the pool of a scheduler with :class:`ConnectOnArrival`,
    waited for (up to ``timeout`` s) before any call to the worker."""
    from hpcgpu.network.preconnect import ConnectOnArrival

    security = temporary_security()
    listen = dict(protocol="tls://", host="127.0.0.1", security=security)
    async with Scheduler(port=0, dashboard=False, plugins=[ConnectOnArrival()], **listen) as scheduler:
        async with Worker(scheduler.address, nthreads=1, **listen) as worker:
            pooled = scheduler.rpc.available[worker.address]
            deadline = asyncio.get_running_loop().time() + timeout
            while not pooled and asyncio.get_running_loop().time() < deadline:
                await asyncio.sleep(0.01)
            return len(pooled)


def test_scheduler_plugin_opens_the_connection_to_a_worker_when_it_arrives():
    assert asyncio.run(_pooled_after_arrival()) == 1


def test_local_gpu_cluster_scheduler_holds_a_connection_to_its_worker_before_the_first_call():
    # the first client.run then finds it in the pool instead of making a TLS handshake
    with LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None) as cluster:
        (address,) = cluster.scheduler_info["workers"]
        pool = cluster.scheduler.rpc
        deadline = time.monotonic() + 10
        while not pool.available[address] and time.monotonic() < deadline:
            time.sleep(0.01)  # the connection is opened in the scheduler's thread
        assert len(pool.available[address]) == 1
