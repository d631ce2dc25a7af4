"""What GPU a process owns: index, UUID and model, from NVML when it is there.

Import is lazy: on a CPU-only login node nothing CUDA-related is loaded.
"""

from __future__ import annotations

import functools
import os
import shutil
from dataclasses import asdict, dataclass

from hpcgpu.system import spawn

__all__ = ["GPUInfo", "describe_gpu", "count_gpus", "count_nvidia_smi_gpus", "gpu_handle", "nvml_library"]


@dataclass(frozen=True)
class GPUInfo:
    """The GPU of one worker; ``uuid``/``model`` are None where no GPU could be seen."""

    index: str
    uuid: str | None = None
    model: str | None = None
    memory: int | None = None

    def as_dict(self) -> dict:
        """Plain dict, for worker metadata."""
        return asdict(self)


@functools.lru_cache(maxsize=1)  # once per process: the preload asks twice, affinity once more
def nvml_library():
    """``pynvml``, initialised (once per process), or None without library, driver or GPU."""
    try:
        import pynvml  # nvidia-ml-py

        pynvml.nvmlInit()
    except Exception:  # no library, no driver, no GPU
        return None
    return pynvml


#: A child forked after NVML's initialisation inherits pynvml "initialised" but NVML is not:
#: every query raises ``NVMLError_Uninitialized`` until it calls ``nvmlInit`` itself (seen
#: on a 2 x H200 host). A launcher counts its GPUs with NVML, then forks the fork server
#: whose children are its workers; each worker sizes its RMM pool and spilling store with
#: NVML. So a forked child starts with :func:`nvml_library`'s cache empty.
os.register_at_fork(after_in_child=nvml_library.cache_clear)


def count_gpus() -> int:
    """GPUs this process can see (0 without a driver)."""
    nvml = nvml_library()
    if nvml is None:
        return 0
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([v for v in visible.split(",") if v.strip()])
    return nvml.nvmlDeviceGetCount()


def gpu_handle(nvml, gpu: str):
    """NVML's handle of ``gpu``: a UUID (``GPU-...``, ``MIG-...``) or a physical index."""
    if gpu.startswith(("GPU-", "MIG-")):
        return nvml.nvmlDeviceGetHandleByUUID(gpu)
    return nvml.nvmlDeviceGetHandleByIndex(int(gpu))


def describe_gpu(index: str) -> GPUInfo:
    """Describe the GPU named ``index`` (a physical index or a UUID) as NVML sees it."""
    nvml = nvml_library()
    if nvml is None:
        return GPUInfo(index=index)
    try:
        handle = gpu_handle(nvml, index)
        uuid = nvml.nvmlDeviceGetUUID(handle)
        model = nvml.nvmlDeviceGetName(handle)
        memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    except Exception:
        return GPUInfo(index=index)
    decode = lambda v: v.decode() if isinstance(v, bytes) else v  # noqa: E731
    return GPUInfo(index=index, uuid=decode(uuid), model=decode(model), memory=memory)


def count_nvidia_smi_gpus() -> int | None:
    """GPUs ``nvidia-smi -L`` lists on this node, or None without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return None
    done = spawn.run(["nvidia-smi", "-L"], timeout=60)
    lines = [line for line in done.stdout.splitlines() if line.startswith("GPU ")]
    return len(lines) if done.returncode == 0 and lines else None
