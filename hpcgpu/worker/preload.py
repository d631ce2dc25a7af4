"""Dask preload run inside each GPU worker process (``--preload hpcgpu.worker.preload``).

Records the worker's GPU in the scheduler's view of it (``WorkerState.extra["hpcgpu"]``)
and sets up its GPU memory. The entry point passes what it decided through
``HPCGPU_*`` environment variables, which the nanny hands down to the worker process.
"""

from __future__ import annotations

import logging
import os

from hpcgpu.worker.gpuinfo import count_gpus, describe_gpu

# Under "distributed." so that Dask's logging configuration shows it at INFO.
logger = logging.getLogger("distributed.hpcgpu")


def dask_setup(worker) -> None:
    """Called by distributed before the worker registers with the scheduler."""
    index = os.environ.get("HPCGPU_GPU", "")
    info = describe_gpu(index).as_dict() if index and count_gpus() else {"index": index or None}
    info.update(
        node=int(os.environ.get("HPCGPU_NODE_RANK", "0")),
        local_rank=int(os.environ.get("HPCGPU_LOCAL_RANK", "0")),
        job_id=os.environ.get("HPCGPU_JOB_ID") or None,
        cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
        hostname=os.uname().nodename,
        gpu_present=info.get("uuid") is not None,
    )
    info.update(getattr(worker, "hpcgpu_setup", {}))  # set by GPUWorker
    worker.startup_information["hpcgpu"] = lambda w: info
    worker.hpcgpu = info
    if info["gpu_present"]:
        logger.info("hpcgpu worker %s on GPU %s (%s, %s)", worker.name, index, info["model"], info["uuid"])
    else:
        logger.info(
            "hpcgpu worker %s: no GPU visible (CUDA_VISIBLE_DEVICES=%s); running the same "
            "plumbing on the CPU", worker.name, os.environ.get("CUDA_VISIBLE_DEVICES"),
        )
