"""Dask preload run inside each GPU worker process (``--preload hpcgpu.worker.preload``).

Records the worker's GPU in the scheduler's view of it (``WorkerState.extra["hpcgpu"]``)
and sets up its GPU memory. The entry point passes what it decided through
``HPCGPU_*`` environment variables, which the nanny hands down to the worker process.
On close (``dask_teardown``) it lets a heartbeat in flight finish first (:class:`HeartbeatGate`).
A worker listening on TLS loads tornado's default TLS context before it registers
(:func:`~hpcgpu.network.tls.load_tornado_tls_defaults`), not in the first call to it.
"""

from __future__ import annotations

import asyncio
import logging
import os

from hpcgpu.network.tls import load_tornado_tls_defaults
from hpcgpu.network.schemes import register as register_schemes
from hpcgpu.system.closelog import quiet_expected_close
from hpcgpu.system import warmup
from hpcgpu.system.versions import local_versions
from hpcgpu.system.threadsignals import unblock_in_main
from hpcgpu.worker.gpuinfo import count_gpus, describe_gpu
from hpcgpu.worker.placement import physical_gpu

# Under "distributed." so that Dask's logging configuration shows it at INFO.
logger = logging.getLogger("distributed.hpcgpu")
# Imported as a preload while the worker is built, before it listens: a worker of a source
# tree without package metadata (no entry point) can still listen on ``unix://`` and
# ``ucx+auth://`` (the import registers them already; said here, where it matters).
register_schemes()


async def dask_setup(worker) -> None:
    """Called by distributed before the worker registers with the scheduler (it listens already)."""
    unblock_in_main()  # a LocalGPUCluster's worker process: started from its blocking loop thread
    nccl_defaults(os.environ)
    warmup.dask_setup(worker)  # the first graph's imports, before the worker takes a task
    _describe(worker)
    if str(worker.address).startswith("tls://"):  # in a thread: the event loop stays free
        await asyncio.to_thread(load_tornado_tls_defaults)


def nccl_defaults(environ) -> None:
    """NVLink multicast off for NCCL in this worker unless the user set it: it can take a
    host's shared GPUs down (docs/security.md).

    >>> env = {}; nccl_defaults(env); env
    {'NCCL_NVLS_ENABLE': '0'}
    >>> env = {"NCCL_NVLS_ENABLE": "1"}; nccl_defaults(env); env
    {'NCCL_NVLS_ENABLE': '1'}
    """
    environ.setdefault("NCCL_NVLS_ENABLE", "0")


def _describe(worker) -> None:
    quiet_expected_close()
    index = os.environ.get("HPCGPU_GPU", "")
    info = describe_gpu(index).as_dict() if index and count_gpus() else {"index": index or None}
    info.update(
        node=int(os.environ.get("HPCGPU_NODE_RANK", "0")),
        local_rank=int(os.environ.get("HPCGPU_LOCAL_RANK", "0")),
        job_id=os.environ.get("HPCGPU_JOB_ID") or None,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        physical_gpu=physical_gpu(index) if index else None,  # the node's own id of it
        hostname=os.uname().nodename,
        gpu_present=info.get("uuid") is not None,
        versions=local_versions(),  # the client compares them (hpcgpu.system.versions)
    )
    info.update(getattr(worker, "hpcgpu_setup", {}))  # set by GPUWorker
    worker.hpcgpu_heartbeat = HeartbeatGate(worker)
    worker.startup_information["hpcgpu"] = lambda w: info
    worker.hpcgpu = info
    if info["gpu_present"]:
        logger.info("hpcgpu worker %s on GPU %s (%s, %s)", worker.name, index, info["model"], info["uuid"])
    else:
        logger.info(
            "hpcgpu worker %s: no GPU visible (CUDA_VISIBLE_DEVICES=%s); running the same "
            "plumbing on the CPU", worker.name, os.environ.get("CUDA_VISIBLE_DEVICES"),
        )


async def dask_teardown(worker) -> None:
    """Called by distributed when the worker closes, before it closes its connections."""
    gate = getattr(worker, "hpcgpu_heartbeat", None)
    if gate is not None:
        await gate.drain()


class HeartbeatGate:
    """Keeps the worker's heartbeat out of its own close.

    distributed's ``Worker.close`` closes its connection pool while a heartbeat may still
    be waiting for the scheduler's answer; that heartbeat then logs ``Failed to communicate
    with scheduler during heartbeat`` with a traceback, at the end of a run that went well.
    The gate wraps the heartbeat's periodic callback so that it knows the heartbeat in
    flight; :meth:`drain`, called before the connections close, stops the callback and
    waits for that heartbeat (at most ``timeout`` seconds: a heartbeat that waits for a
    scheduler that is gone must not hold the close up).
    """

    def __init__(self, worker, timeout: float = 3.0):
        self.timeout = timeout
        self.in_flight: asyncio.Future | None = None
        self._periodic = worker.periodic_callbacks.get("heartbeat")
        if self._periodic is not None:
            self._heartbeat = self._periodic.callback
            self._periodic.callback = self._beat

    def _beat(self):
        # a Task, so that drain can wait for it; tornado awaits what the callback returns
        self.in_flight = asyncio.ensure_future(self._heartbeat())
        return self.in_flight

    async def drain(self) -> None:
        if self._periodic is None:
            return
        self._periodic.stop()
        if self.in_flight is not None and not self.in_flight.done():
            await asyncio.wait([self.in_flight], timeout=self.timeout)
