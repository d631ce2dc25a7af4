"""Collectives that wait without taking a core: a rank that waits for rank 0 sleeps.

A blocking MPI collective polls: Open MPI's progress engine spins at 100 % of a core
until the last rank arrives. Every rank but 0 waits that way while rank 0 makes the
TLS certificate and starts the scheduler, and again while it shuts the cluster down, a core
each taken from the node's workers (or, on an oversubscribed node, from rank 0 itself).
Here each waiting rank enters a non-blocking barrier (MPI-3 ``MPI_Ibarrier``) and tests it
between sleeps, so that the blocking collective that follows finds every rank there.
"""

from __future__ import annotations

import time

__all__ = ["wait_for_every_rank", "idle_bcast"]

#: the longest sleep between two tests of the barrier, in seconds: the most a collective
#: is delayed after the last rank arrives
MAX_SLEEP = 0.02


def wait_for_every_rank(comm, max_sleep: float = MAX_SLEEP) -> None:
    """Return once every rank of ``comm`` has called this, sleeping while it waits.

    The sleeps grow from 1 ms to ``max_sleep``: a short wait ends within a millisecond
    or two, a long one costs a few system calls a second.

    Examples
    --------
    >>> from mpi4py import MPI      # doctest: +SKIP
    >>> wait_for_every_rank(MPI.COMM_WORLD)   # doctest: +SKIP
    """
    request = comm.Ibarrier()
    sleep = 0.001
    while not request.Test():
        time.sleep(sleep)
        sleep = min(2 * sleep, max_sleep)


def idle_bcast(comm, value=None, root: int = 0):
    """``comm.bcast(value, root)``, the ranks that wait for ``root`` sleeping meanwhile.

    Examples
    --------
    >>> from mpi4py import MPI      # doctest: +SKIP
    >>> idle_bcast(MPI.COMM_WORLD, "tls://10.0.0.1:8786" if rank == 0 else None)  # doctest: +SKIP
    'tls://10.0.0.1:8786'
    """
    wait_for_every_rank(comm)
    return comm.bcast(value, root=root)
