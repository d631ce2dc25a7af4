"""Open the scheduler's connection to each worker when it arrives, not in the first call to it.

distributed's scheduler connects to a worker the first time it calls it (``client.run``,
a ``gather`` through the scheduler, ``retire_workers``) and keeps that connection in its
pool (``distributed.scheduler.reuse-broadcast-comm``). Over TLS the first connection is a
handshake (round trips between the two processes, a signature each side) and the first use
of both ends' TLS contexts: a user's first ``client.run`` on a TLS cluster took 12 ms where
later ones took 1.4 ms and a call on a new connection 6.8 ms (``benchmarks/run_cost.py``,
2-core machine). :class:`ConnectOnArrival` opens that connection in the background when
the worker registers and hands it to the pool, where the first call finds it.
"""

from __future__ import annotations

import asyncio

from distributed.diagnostics.plugin import SchedulerPlugin

__all__ = ["ConnectOnArrival"]


class ConnectOnArrival(SchedulerPlugin):
    """A scheduler plugin putting a connection to each new worker in the scheduler's pool.

    One connection per worker, which the scheduler's first call to it would open anyway;
    a worker that leaves before it is made is skipped.
    """

    name = "hpcgpu-connect-on-arrival"

    def __init__(self):
        self._opening: set[asyncio.Task] = set()

    def add_worker(self, scheduler, worker: str) -> None:
        task = asyncio.ensure_future(_open(scheduler.rpc, worker))
        self._opening.add(task)
        task.add_done_callback(self._opening.discard)

    async def close(self) -> None:
        """Called before the scheduler closes its pool: no connection is left half made."""
        for task in list(self._opening):
            task.cancel()
        await asyncio.gather(*self._opening, return_exceptions=True)


async def _open(pool, address: str) -> None:
    try:
        comm = await pool.connect(address)
    except (OSError, RuntimeError, asyncio.TimeoutError):  # the worker left, or the pool closed
        return
    pool.reuse(address, comm)
