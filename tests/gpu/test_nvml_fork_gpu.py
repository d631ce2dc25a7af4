"""NVML across fork: a process forked after this one used NVML still reads its GPU.

A launcher counts its GPUs with NVML, then forks the fork server from which its workers are
forked; each worker reads its GPU's memory with NVML to size its RMM pool and spilling store.
"""

import os

import pytest

from hpcgpu.worker.gpuinfo import gpu_handle, nvml_library

pytestmark = pytest.mark.gpu


def _forked_child_reads(gpu: str) -> int:
    pid = os.fork()
    if pid == 0:  # the child: exit 0 when NVML answers
        code = 1
        try:
            nvml = nvml_library()
            code = 0 if nvml.nvmlDeviceGetMemoryInfo(gpu_handle(nvml, gpu)).total > 0 else 1
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_a_process_forked_after_nvml_was_used_reads_its_gpu():
    nvml = nvml_library()
    if nvml is None:
        pytest.skip("NVML cannot start here")
    count = nvml.nvmlDeviceGetCount()
    assert [_forked_child_reads(str(i)) for i in range(count)] == [0] * count
    nvml = nvml_library()  # and this process, again
    assert nvml.nvmlDeviceGetMemoryInfo(gpu_handle(nvml, "0")).total > 0
