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

import dask
from distributed import Scheduler
from distributed.deploy.spec import SpecCluster
from distributed.worker_memory import parse_memory_limit

from hpcgpu.cluster.local.spec import (gpu_options, nanny_and_worker_class, same_host_protocol,
                                       split_local_kwargs, ucx_protocol)
from hpcgpu.cluster.shutdown import close_at_exit
from hpcgpu.network.colocate import CoLocateRoots
from hpcgpu.network.config import QUIET_PROGRESS
from hpcgpu.network.dashboard import dashboard_link
from hpcgpu.network.preconnect import ConnectOnArrival
from hpcgpu.network.advice import local_protocol
from hpcgpu.system.closelog import quiet_expected_close
from hpcgpu.system.pymain import children_drop_cwd
from hpcgpu.system.scratch import scratch_directory
from hpcgpu.network.schemes import register as register_schemes
from hpcgpu.network.tls import check_plain_protocol, cluster_security
from hpcgpu.system.threadsignals import block_here
from hpcgpu.worker.forkstart import fork_started
from hpcgpu.worker.gpusetup import cudf_spill_here, parent_side_setup
from hpcgpu.worker.gpuworker import GPUWorker
from hpcgpu.jobspec.gpuoptions import parse_cuda_visible_devices
from hpcgpu.jobspec.keywords import check_keywords

_logger = logging.getLogger("distributed.hpcgpu")

__all__ = ["LocalGPUCluster", "visible_gpus", "rotated"]


def visible_gpus() -> list[str]:
    """The GPUs this process may use: ``CUDA_VISIBLE_DEVICES`` or every device NVML sees."""
    from hpcgpu.worker.gpuinfo import count_gpus
    from hpcgpu.worker.placement import visible_devices

    n = count_gpus()
    visible = visible_devices(os.environ)
    return visible[:n] if visible else [str(i) for i in range(n)]


def _as_list(value) -> list:
    return [] if value is None else [value] if isinstance(value, str) else list(value)


def _quiet(silence_logs, worker_options: dict) -> tuple[dict, dict]:
    """SpecCluster's ``silence_logs`` and the workers' environment for it (the nanny's
    option quiets only its own logger; the worker process reads its logging level from
    dask config at import). Sets the nannies' option in ``worker_options``. The cluster's
    scheduler logs in this process: an expected close there loses its traceback too."""
    quiet_expected_close()
    if silence_logs is None:
        return {}, {}
    worker_options["silence_logs"] = silence_logs
    level = logging.getLevelName(silence_logs) if isinstance(silence_logs, int) else silence_logs
    return {"silence_logs": silence_logs}, {"DASK_LOGGING__DISTRIBUTED": str(level).lower()}


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

    Takes ``dask_cuda.LocalCUDACluster``'s signature (dask-cuda 26.10) with its meanings,
    and every keyword of :class:`distributed.LocalCluster` (``scheduler_port``, ``host``,
    ``worker_class``, ``data``, ``death_timeout``, ...): switching is one import,
    ``from hpcgpu import LocalGPUCluster as LocalCUDACluster``. What differs
    (docs/migrating.md): without an ``rmm_*`` keyword each worker gets hpcgpu's RMM pool;
    TLS by default, and private Unix sockets between the workers; the scheduler and
    dashboard listen on localhost; a machine without
    GPUs runs CPU workers (named ``<host>-0-<i>``; a GPU worker is named after its device).

    Parameters
    ----------
    CUDA_VISIBLE_DEVICES : str or list, optional
        The GPUs, one worker each: ``"0,1"``, ``[0, 1]``, GPU or MIG UUIDs (as ``nvidia-smi
        -L`` prints them). Default: this process's ``CUDA_VISIBLE_DEVICES``, else every GPU.
    n_workers : int, optional
        Workers to start: one per GPU by default (the first ``n_workers`` GPUs when given);
        without GPUs, ``cpu_count // threads_per_worker`` up to 4.
    threads_per_worker : int
        Threads per worker.
    memory_limit : int, float, str or None
        Host memory per worker: ``"auto"`` with GPUs is the host's memory divided by the
        workers (as dask-cuda); without GPUs, Dask's share per thread.
    device_memory_limit, enable_cudf_spill, cudf_spill_stats, rmm_pool_size,
    rmm_maximum_pool_size, rmm_managed_memory, rmm_async, rmm_allocator_external_lib_list,
    rmm_release_threshold, rmm_log_directory, rmm_track_allocations, log_spilling, pre_import,
    enable_tcp_over_ucx, enable_infiniband, enable_nvlink, enable_rdmacm, cpu_affinity
        Each worker's GPU options, as dask-cuda's
        (:class:`~hpcgpu.jobspec.gpuoptions.GPUWorkerOptions`).
    local_directory, protocol, interface, host, dashboard_address
        As :class:`distributed.LocalCluster`: scheduler, nannies and workers listen on
        ``127.0.0.1`` unless ``host`` or ``interface`` is given, the dashboard on
        ``localhost`` (``dashboard_address=":8787"``: every interface). A UCX transport
        switched on means ``protocol="ucx"``.
    security : bool or distributed.security.Security, optional
        TLS with a temporary certificate held in this process by default, as the batch
        clusters make it: only clients given ``cluster.security`` connect (``Client(cluster)``
        does). The nannies and workers then listen on ``unix://`` sockets that only this
        user can reach (:mod:`hpcgpu.network.unixcomm`; ``protocol="tls"``, ``host`` or
        ``interface``: TLS there too). ``False``: plain TCP, which any user of this machine
        can reach on the loopback address (warned).
    gpus : list of str, optional
        hpcgpu's older name for ``CUDA_VISIBLE_DEVICES`` (``[]``: CPU workers only).
    **kwargs
        ``LocalCluster``'s other keywords; the rest go to each worker's nanny.

    Examples
    --------
    >>> from distributed import Client
    >>> with LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None) as cluster:
    ...     with Client(cluster) as client:
    ...         client.submit(sum, [1, 2]).result()
    3
    """

    def __init__(self, CUDA_VISIBLE_DEVICES=None, n_workers: int | None = None, threads_per_worker: int = 1,
                 memory_limit="auto", device_memory_limit="default", enable_cudf_spill: bool = False,
                 cudf_spill_stats: int = 0, local_directory: str | None = None, protocol: str | None = None,
                 enable_tcp_over_ucx=None, enable_infiniband=None, enable_nvlink=None, enable_rdmacm=None,
                 rmm_pool_size="auto", rmm_maximum_pool_size=None, rmm_managed_memory: bool = False,
                 rmm_async: bool = False, rmm_allocator_external_lib_list=None, rmm_release_threshold=None,
                 rmm_log_directory=None, rmm_track_allocations: bool = False, log_spilling: bool = False,
                 pre_import=None, *, gpus: list[str] | None = None, cpu_affinity: bool = True,
                 interface: str | None = None, host: str | None = None,
                 dashboard_address: str | None = "localhost:0", security=None, worker_class=None,
                 asynchronous: bool = False, silence_logs=None, **kwargs):
        values = check_keywords(dict(locals()))  # counts given as "2" come back as numbers
        threads_per_worker, n_workers = values["threads_per_worker"], values["n_workers"]
        self.gpu_options = gpu_options(values)
        protocol = ucx_protocol(protocol, self.gpu_options)
        self._nanny, self._worker = nanny_and_worker_class(worker_class, GPUWorker, log_spilling)
        self._nanny = fork_started(self._nanny)  # worker processes from a fork server, not spawned
        scheduler_extra, worker_extra, cluster_extra = split_local_kwargs(kwargs)
        self.gpus = self._devices(CUDA_VISIBLE_DEVICES, gpus)
        n_workers = self._count(n_workers, threads_per_worker)
        if enable_cudf_spill:
            cudf_spill_here(cudf_spill_stats)  # the client and scheduler process too
        security = cluster_security(security, default=True, warn_plain=True)
        protocol = local_protocol(protocol, security)  # UCX that cannot load: the default, said why
        check_plain_protocol(protocol, security)
        own_protocol = same_host_protocol(protocol, security, host, interface)
        register_schemes()  # unix, ucx+auth: the scheduler and nannies live in this process
        if host is None and interface is None:
            host = "127.0.0.1"  # as distributed.LocalCluster: not reachable from other hosts
        self._dashboard_address = dashboard_address
        if self.gpus and memory_limit == "auto":  # dask-cuda's share: the host's memory per GPU worker
            memory_limit = parse_memory_limit("auto", 1, total_cores=max(n_workers, 1), logger=_logger)
        listen = dict(protocol=protocol, interface=interface, host=host, security=security)
        self._worker_options: dict = dict(dict(nthreads=threads_per_worker, memory_limit=memory_limit,
                                               dashboard_address=None,
                                               local_directory=local_directory or scratch_directory(),
                                               **dict(listen, protocol=own_protocol)), **worker_extra)
        scheduler = {"cls": Scheduler, "options": dict(dict(
            port=0, dashboard=dashboard_address is not None,
            # without a dashboard the scheduler still serves /health and metrics: on loopback too
            dashboard_address=dashboard_address or "localhost:0", **listen),
            **{"plugins": [CoLocateRoots(), ConnectOnArrival()], **scheduler_extra})}
        extra, self._log_env = _quiet(silence_logs, self._worker_options)
        workers = {self._worker_name(i): self._spec(i) for i in range(n_workers)}
        self._start_resource_tracker()
        super().__init__(workers=workers, scheduler=scheduler, asynchronous=asynchronous,
                         security=security, **extra, **cluster_extra)
        close_at_exit(self)  # a script that ends with it open: closed before shutdown

    async def _start(self):
        block_here()  # the loop's thread, and the threads it starts: stop signals to the main one
        # the scheduler's UCX (this process's, made once, at its listener) as the workers'; set
        # for the start only, so that the process's other Dask code keeps its own configuration
        with dask.config.set(self.gpu_options.ucx_config()):
            await super()._start()

    def _start_resource_tracker(self) -> None:
        """multiprocessing's resource tracker, started now from this thread: the nannies
        would start it from a thread of the loop, and starting it unblocks SIGINT and
        SIGTERM in the thread that does (Python's ``resource_tracker.ensure_running``).
        It, the fork server and spawned worker processes are ``python -c``, which puts the
        working directory first on ``sys.path``, maybe a shared one: they drop it."""
        from multiprocessing import resource_tracker

        children_drop_cwd()
        resource_tracker.ensure_running()

    def _count(self, n_workers: int | None, threads_per_worker: int) -> int:
        if n_workers is None:
            return len(self.gpus) or max(1, min(4, (os.cpu_count() or 1) // threads_per_worker))
        if n_workers < 0:
            raise ValueError(f"n_workers={n_workers} must be 0 or more")
        if self.gpus and n_workers > len(self.gpus):
            raise ValueError(f"n_workers={n_workers} but only {len(self.gpus)} GPUs are visible "
                             f"({','.join(self.gpus)}): ask for at most {len(self.gpus)}")
        return n_workers

    @staticmethod
    def _devices(cuda_visible_devices, gpus) -> list[str]:
        if cuda_visible_devices is not None and gpus is not None:
            raise ValueError("give the GPUs once: CUDA_VISIBLE_DEVICES (dask-cuda's keyword) or gpus")
        if cuda_visible_devices is not None:
            return parse_cuda_visible_devices(cuda_visible_devices)
        return visible_gpus() if gpus is None else parse_cuda_visible_devices(gpus) if gpus else []

    def _worker_name(self, i: int) -> int | str:
        """A GPU worker is named after its device, as in dask-cuda (``0``, a UUID); a CPU
        worker ``<host>-0-<i>``, as batch workers."""
        if i < len(self.gpus):
            return int(self.gpus[i]) if self.gpus[i].isdigit() else self.gpus[i]
        return f"{socket.gethostname()}-0-{i}"

    def _spec(self, i: int) -> dict:
        env = dict(self._worker_options.get("env") or {}, **self.gpu_options.to_env(), **self._log_env,
                   HPCGPU_LOCAL_RANK=str(i), HPCGPU_NODE_RANK="0",
                   HPCGPU_GPU=self.gpus[i] if self.gpus else "", HPCGPU_JOB_ID="")
        preload = ["hpcgpu.worker.preload", *_as_list(self._worker_options.get("preload"))]
        options = dict(self._worker_options, env=env, preload=preload, worker_class=self._worker)
        if self.gpu_options.ucx_config():
            options["config"] = {**self.gpu_options.ucx_config(), **(options.get("config") or {})}
        if str(options.get("protocol") or "").startswith("ucx"):  # the worker waits for UCX asleep
            env.update({k: v for k, v in QUIET_PROGRESS if k not in env})
        if self.gpus:
            env["CUDA_VISIBLE_DEVICES"] = rotated(self.gpus, i)
            options["resources"] = {"GPU": 1, **(options.get("resources") or {})}
        else:
            env["CUDA_VISIBLE_DEVICES"] = ""  # the CPU mode: no process may grab a device
        if not (isinstance(self._worker, type) and issubclass(self._worker, GPUWorker)):
            options.update(parent_side_setup(self.gpu_options, self.gpus[i] if self.gpus else None,
                                             options))
        return {"cls": self._nanny, "options": options}

    @property
    def dashboard_link(self) -> str:
        """The dashboard where it listens (``localhost`` by default); upstream names the
        scheduler's host, where a dashboard bound to another address refuses the link."""
        return dashboard_link(self.scheduler_info, self.scheduler_address, self._dashboard_address)

    def new_worker_spec(self) -> dict:
        """The next free GPU's worker (SpecCluster calls this from ``scale``)."""
        used = set(self.worker_spec)
        i = next(i for i in range(len(self.worker_spec) + 1) if self._worker_name(i) not in used)
        if self.gpus and i >= len(self.gpus):
            raise ValueError(f"all {len(self.gpus)} local GPUs have a worker: scale to at most "
                             f"{len(self.gpus)}")
        return {self._worker_name(i): self._spec(i)}
