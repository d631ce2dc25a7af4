"""The first call to a TLS worker costs what later ones do: the worker builds tornado's default
TLS context before it registers, not when it accepts its first connection (the scheduler's
first call to it: ``client.run``, ``gather``, another worker's fetch)."""

from __future__ import annotations

import asyncio

import pytest
from distributed import Scheduler, Worker
from tornado.netutil import _client_ssl_defaults

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
