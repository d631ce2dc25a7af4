"""``LocalGPUCluster``: one GPU worker per local GPU, or a local CPU cluster without one.

The embedded default on a workstation or an interactive GPU node. Each worker is the
same :class:`~hpcgpu.worker.gpuworker.GPUWorker` (RMM pool, spilling, CPU affinity,
``GPU=1`` resource, metadata preload) that batch jobs start, behind a nanny, with
``CUDA_VISIBLE_DEVICES`` rotated so that its own GPU is device 0 and its peers stay
visible for CUDA IPC (as dask-cuda does).
"""

from __future__ import annotations

import logging
import os
import socket

from distributed import Nanny, Scheduler
from distributed.deploy.spec import SpecCluster
from distributed.utils import format_dashboard_link

from hpcgpu.network.advice import local_protocol
from hpcgpu.network.tls import cluster_security
from hpcgpu.worker.gpusetup import GPUSetup
from hpcgpu.worker.gpuworker import GPUWorker
from hpcgpu.worker.hostmemory import host_memory_limit

__all__ = ["LocalGPUCluster", "visible_gpus", "rotated"]


def visible_gpus() -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` or every device NVML sees."""
    from hpcgpu.worker.gpuinfo import count_gpus
    from hpcgpu.worker.placement import visible_devices

    n = count_gpus()
    visible = visible_devices(os.environ)
    return visible[:n] if visible else [str(i) for i in range(n)]


def rotated(gpus: list[str], i: int) -> str:
    """``CUDA_VISIBLE_DEVICES`` for the worker of ``gpus[i]``: its GPU first.

    Examples
    --------
    >>> rotated(["0", "1", "2", "3"], 2)
    '2,3,0,1'
    """
    return ",".join(gpus[i:] + gpus[:i])


class LocalGPUCluster(SpecCluster):
    """A scheduler and one GPU worker per local GPU (a CPU worker per slot without GPUs).

    Parameters
    ----------
    n_workers : int, optional
        Workers to start: all visible GPUs by default; without GPUs, ``cpu_count //
        threads_per_worker`` up to 4.
    threads_per_worker : int
        Threads per worker (1 keeps one task's kernels queued on its GPU at a time; more
        overlaps Python overhead with GPU work).
    memory_limit : str
        Host memory per worker (Dask's ``memory_limit``). "auto" with GPUs: the host's
        memory less 5 % headroom, divided by the number of GPU workers (as dask-cuda);
        without GPUs, Dask's share per thread.
    rmm_pool_size, rmm_async, device_memory_limit, cpu_affinity
        As the worker entry point's options (:class:`~hpcgpu.worker.gpusetup.GPUSetup`).
    protocol, interface, host, dashboard_address
        As :class:`distributed.LocalCluster`: scheduler, nannies and workers listen on
        ``127.0.0.1`` unless ``host`` or ``interface`` is given, the dashboard on
        ``localhost`` (``dashboard_address=":8787"``: every interface).
    security : bool or distributed.security.Security, optional
        TLS with a temporary certificate held in this process by default, as the batch
        clusters make it: only clients given ``cluster.security`` connect (``Client(cluster)``
        does). ``False``: plain TCP, which any user of this machine can reach on the
        loopback address (warned).
    gpus : list of str, optional
        Which GPUs (indices or UUIDs); default :func:`visible_gpus`.

    Examples
    --------
    >>> from distributed import Client
    >>> with LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None) as cluster:
    ...     with Client(cluster) as client:
    ...         client.submit(sum, [1, 2]).result()
    3
    """

    def __init__(self, n_workers: int | None = None, *, threads_per_worker: int = 1,
                 memory_limit: str = "auto", rmm_pool_size: str = "auto", rmm_async: bool = False,
                 device_memory_limit: str = "auto", cpu_affinity: bool = True,
                 protocol: str | None = None, interface: str | None = None, host: str | None = None,
                 dashboard_address: str | None = "localhost:0", security=None, gpus: list[str] | None = None,
                 asynchronous: bool = False, silence_logs=None, **kwargs):
        if threads_per_worker < 1:
            raise ValueError(f"threads_per_worker={threads_per_worker!r} must be at least 1")
        self.gpus = visible_gpus() if gpus is None else list(gpus)
        if n_workers is None:
            n_workers = len(self.gpus) or max(1, min(4, (os.cpu_count() or 1) // threads_per_worker))
        if self.gpus and n_workers > len(self.gpus):
            raise ValueError(f"n_workers={n_workers} but only {len(self.gpus)} GPUs are visible "
                             f"({','.join(self.gpus)}): ask for at most {len(self.gpus)}")
        self._setup = GPUSetup(rmm_pool_size=rmm_pool_size, rmm_async=rmm_async,
                               device_memory_limit=device_memory_limit, cpu_affinity=cpu_affinity)
        memory_limit = host_memory_limit(memory_limit, n_workers if self.gpus else 0)
        security = cluster_security(security, default=True, warn_plain=True)
        if host is None and interface is None:
            host = "127.0.0.1"  # as distributed.LocalCluster: not reachable from other hosts
        self._dashboard_address = dashboard_address
        protocol = local_protocol(protocol, security)  # UCX that cannot load: the default, said why
        self._worker_options: dict = dict(nthreads=threads_per_worker, memory_limit=memory_limit,
                                          protocol=protocol, interface=interface, host=host,
                                          security=security, dashboard_address=None)
        scheduler = {"cls": Scheduler, "options": dict(
            port=0, protocol=protocol, interface=interface, host=host, security=security,
            dashboard=dashboard_address is not None,
            # without a dashboard the scheduler still serves /health and metrics: on loopback too
            dashboard_address=dashboard_address or "localhost:0")}
        extra = {} if silence_logs is None else {"silence_logs": silence_logs}
        self._log_env: dict = {}
        if silence_logs is not None:
            self._worker_options["silence_logs"] = silence_logs
            # the nanny's option quiets only its own logger; the worker process reads its
            # logging level from dask config at import
            level = logging.getLevelName(silence_logs) if isinstance(silence_logs, int) else silence_logs
            self._log_env = {"DASK_LOGGING__DISTRIBUTED": str(level).lower()}
        workers = {self._worker_name(i): self._spec(i) for i in range(n_workers)}
        super().__init__(workers=workers, scheduler=scheduler, asynchronous=asynchronous,
                         security=security, **extra, **kwargs)

    @staticmethod
    def _worker_name(i: int) -> str:
        return f"{socket.gethostname()}-0-{i}"

    def _spec(self, i: int) -> dict:
        env = dict(self._setup.to_env(), **self._log_env, HPCGPU_LOCAL_RANK=str(i), HPCGPU_NODE_RANK="0",
                   HPCGPU_GPU=self.gpus[i] if self.gpus else "", HPCGPU_JOB_ID="")
        options = dict(self._worker_options, env=env, preload=["hpcgpu.worker.preload"],
                       worker_class=GPUWorker)
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = rotated(self.gpus, i)
            options["resources"] = {"GPU": 1}
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU mode: no process may grab a device
        return {"cls": Nanny, "options": options}

    @property
    def dashboard_link(self) -> str:
        """The dashboard where it listens (``localhost`` by default); upstream names the
        scheduler's host, where a dashboard bound to another address refuses the link."""
        port = self.scheduler_info.get("services", {}).get("dashboard")
        if port is None:
            return ""
        from hpcgpu.cluster.network import dashboard_host

        scheduler_host = self.scheduler_address.split("://")[1].split("/")[0].rsplit(":", 1)[0]
        return format_dashboard_link(dashboard_host(self._dashboard_address, scheduler_host), port)

    def new_worker_spec(self) -> dict:
        """The next free GPU's worker (SpecCluster calls this from ``scale``)."""
        used = set(self.worker_spec)
        i = next(i for i in range(len(self.worker_spec) + 1) if self._worker_name(i) not in used)
        if self.gpus and i >= len(self.gpus):
            raise ValueError(f"all {len(self.gpus)} local GPUs have a worker: scale to at most "
                             f"{len(self.gpus)}")
        return {self._worker_name(i): self._spec(i)}
