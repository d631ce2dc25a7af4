"""The scheduler's workers, asked for when they are needed."""

from __future__ import annotations

__all__ = ["scheduler_workers"]


def scheduler_workers(client) -> dict:
    """The workers the scheduler of ``client`` (a synchronous ``distributed.Client``) has
    now: address -> information, as in ``Client.scheduler_info()["workers"]``.

    Not ``client.scheduler_info()["workers"]``: in distributed 2026.7 that returns a cache
    which the client's own periodic update (it asks for no workers) can overwrite between the
    fetch and the return. With a 20 ms update interval, 2 calls in 1000 returned no workers
    while two were connected; a wait for "no workers left" could end early.

    Examples
    --------
    >>> from distributed import Client, LocalCluster
    >>> with LocalCluster(n_workers=2, processes=False, dashboard_address=None) as cluster, \\
    ...         Client(cluster) as client:
    ...     len(scheduler_workers(client))
    2
    """
    return client.sync(client.scheduler.identity, n_workers=-1)["workers"]
