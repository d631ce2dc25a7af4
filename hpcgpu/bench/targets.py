"""Where a sweep runs: the cluster paths, each opened once per GPU count.

- ``LocalTarget``: this machine's GPUs (``hpcgpu.cluster.local.LocalGPUCluster``), or without
  GPUs that cluster's CPU mode, one worker per "GPU".
- ``DaskCudaTarget`` and ``PlainTarget``: the references of the side-by-side mode,
  dask-cuda's ``LocalCUDACluster`` and plain Dask (one Nanny per GPU, pinned through
  ``CUDA_VISIBLE_DEVICES``, nothing else set up).
- ``ExistingTarget``: a running scheduler (``--scheduler-file``/``--scheduler-address``,
  or ``DASK_SCHEDULER_ADDRESS`` inside ``hpcgpu run``); a sweep uses 1, 2, 4... of its
  workers by restricting every computation to them.
- ``JobQueueTarget``: cluster mode, one ``hpcgpu.cluster.<X>Cluster`` per GPU count,
  ``scale(gpus=N)``.
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

from hpcgpu.schedulers.registry import get_scheduler
from hpcgpu.system.workers import scheduler_workers

__all__ = ["Session", "LocalTarget", "DaskCudaTarget", "PlainTarget", "ExistingTarget", "JobQueueTarget"]


@dataclass(frozen=True)
class Session:
    """An open cluster with ``gpus`` workers: the client, the workers to use, the start time."""

    client: Any
    workers: tuple[str, ...] | None
    protocol: str
    bootstrap_seconds: float | None
    close: Callable[[], None] = lambda: None


def _protocol_of(client) -> str:
    return client.scheduler.address.split("://", 1)[0]


def _open_owned(make: Callable[[], Any], gpus: int, timeout: float) -> Session:
    """Start a cluster with ``make()``, wait for ``gpus`` workers, time it all."""
    from distributed import Client

    start = time.perf_counter()
    cluster = make()
    try:
        client = Client(cluster)
        client.wait_for_workers(gpus, timeout=timeout)
    except BaseException:
        cluster.close()
        raise
    return _owned_session(client, cluster, time.perf_counter() - start)


def _owned_session(client, cluster, seconds: float) -> Session:
    """The session of a cluster made for it: closing it closes the client and the cluster."""

    def close() -> None:
        client.close()
        cluster.close()

    return Session(client, None, _protocol_of(client), seconds, close)


@dataclass(frozen=True)
class _OwnedTarget:
    """A cluster made (:meth:`_make`) for each GPU count, and closed after it."""

    protocol: str = "tcp"
    timeout: float = 120
    label: str = "hpcgpu"
    path: str = "local"
    owns_workers: bool = True
    library: str = "hpcgpu"

    def _make(self, gpus: int):
        raise NotImplementedError

    def open(self, gpus: int) -> Session:
        return _open_owned(lambda: self._make(gpus), gpus, self.timeout)


@dataclass(frozen=True)
class LocalTarget(_OwnedTarget):
    """This machine: ``LocalGPUCluster``, one worker per GPU, or with fewer GPUs than asked
    one CPU worker per "GPU" (its CPU mode: workers forked from one server, as ``hpcgpu
    demo``'s, so a CPU sweep runs hpcgpu's own path, not another cluster's). ``tcp`` (the
    references' protocol, dask-cuda's default) is plain TCP: without the certificate."""

    threads_per_worker: int = 1

    def _make(self, gpus: int):
        from hpcgpu.cluster.local import LocalGPUCluster
        from hpcgpu.worker.gpuinfo import count_gpus

        options = {} if count_gpus() >= gpus else {"gpus": []}
        if self.protocol == "tcp":
            options["security"] = False
        with warnings.catch_warnings():  # plain TCP was asked for (--protocol tcp)
            warnings.filterwarnings("ignore", message="security=False", category=UserWarning)
            return LocalGPUCluster(n_workers=gpus, threads_per_worker=self.threads_per_worker,
                                   protocol=self.protocol, **options)


@dataclass(frozen=True)
class DaskCudaTarget(_OwnedTarget):
    """Reference: dask-cuda's LocalCUDACluster with its defaults, ``gpus`` workers."""

    label: str = "dask-cuda"
    library: str = "dask"

    def _make(self, gpus: int):
        from dask_cuda import LocalCUDACluster

        return LocalCUDACluster(n_workers=gpus, protocol=self.protocol, dashboard_address="localhost:0")


@dataclass(frozen=True)
class PlainTarget(_OwnedTarget):
    """Reference: plain Dask, one Nanny per GPU pinned by CUDA_VISIBLE_DEVICES, defaults otherwise."""

    label: str = "plain"
    library: str = "dask"
    threads_per_worker: int = 1

    def _make(self, gpus: int):
        from distributed import Nanny, Scheduler, SpecCluster

        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        devices = visible.split(",") if visible else [str(i) for i in range(gpus)]
        workers = {
            i: {"cls": Nanny, "options": {
                "nthreads": self.threads_per_worker,
                "env": {"CUDA_VISIBLE_DEVICES": ",".join(devices[i:] + devices[:i])}}}
            for i in range(gpus)
        }
        scheduler = {"cls": Scheduler, "options": {"protocol": self.protocol, "dashboard_address": "localhost:0"}}
        return SpecCluster(workers=workers, scheduler=scheduler, silence_logs=logging.WARNING)


@dataclass
class ExistingTarget:
    """A scheduler someone else started; sweeps use the first N of its workers."""

    address: str | None = None
    scheduler_file: str | None = None
    timeout: float = 300
    label: str = "hpcgpu"
    path: str = "scheduler"
    owns_workers: bool = False
    library: str = "hpcgpu"
    _client: Any = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if (self.address is None) == (self.scheduler_file is None):
            raise ValueError("ExistingTarget needs exactly one of address and scheduler_file")

    def open(self, gpus: int) -> Session:
        from distributed import Client

        if self._client is None:
            self._client = Client(self.address, scheduler_file=self.scheduler_file, timeout=self.timeout)
        client = self._client
        client.wait_for_workers(gpus, timeout=self.timeout)
        info = scheduler_workers(client)
        ordered = sorted(info, key=lambda a: (str(info[a].get("name")), a))
        return Session(client, tuple(ordered[:gpus]), _protocol_of(client), None)

    def shutdown(self) -> None:
        """Close the client (the scheduler and its workers stay)."""
        if self._client is not None:
            self._client.close()
            self._client = None


@dataclass(frozen=True)
class JobQueueTarget:
    """Cluster mode: ``hpcgpu.cluster.<Scheduler>Cluster`` per GPU count, ``scale(gpus=N)``.

    Jobs have ``min(N, gpus_per_node)`` GPUs on one node each, so that N GPUs are whole
    jobs; the bootstrap time runs from ``scale`` to N connected workers.
    """

    scheduler: str
    gpus_per_node: int
    options: dict = field(default_factory=dict)
    protocol: str | None = None
    timeout: float = 600
    label: str = "hpcgpu"
    owns_workers: bool = True
    library: str = "hpcgpu"

    @property
    def path(self) -> str:
        return self.scheduler

    def cluster_class(self):
        import hpcgpu.cluster

        return getattr(hpcgpu.cluster, get_scheduler(self.scheduler).cluster_class)

    def open(self, gpus: int) -> Session:
        extra = {"protocol": self.protocol} if self.protocol else {}
        cluster = self.cluster_class()(gpus_per_node=min(gpus, self.gpus_per_node), **extra, **self.options)
        try:
            client = cluster.get_client()
            start = time.perf_counter()
            cluster.scale(gpus=gpus)
            client.wait_for_workers(gpus, timeout=self.timeout)
            seconds = time.perf_counter() - start
        except BaseException:
            cluster.close()
            raise
        return _owned_session(client, cluster, seconds)
