"""Over UCX, a CuPy block moves between the workers of two GPUs of one host through CUDA
IPC (NVLink where there is one), not through host memory (marked ``gpu``).

Two witnesses: UCX's own protocol report (``UCX_PROTO_INFO=y``, printed by the worker
processes when they first choose a protocol) names the ``cuda_ipc`` transport for the
device-memory transfer, and 4 GiB cross faster than any host-staged path could carry them
(PCIe 5.0 x16 is 64 GB/s each way; host staging copies twice).
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.gpu

cupy = pytest.importorskip("cupy")
pytest.importorskip("distributed_ucxx")


def _make(n):
    return cupy.ones(n, dtype="u1")


def _size(x):
    return int(x.nbytes), type(x).__module__.split(".")[0]


def test_a_cupy_block_crosses_two_gpus_over_cuda_ipc(monkeypatch, capfd):
    from distributed import Client

    from hpcgpu import LocalGPUCluster

    if cupy.cuda.runtime.getDeviceCount() < 2:
        pytest.skip("needs 2 GPUs or more")
    monkeypatch.setenv("UCX_PROTO_INFO", "y")  # the worker processes inherit it
    size, best = 2**32, float("inf")
    with LocalGPUCluster(n_workers=2, protocol="ucx", dashboard_address=None) as cluster, \
            Client(cluster) as client:
        a, b = sorted(client.scheduler_info()["workers"])
        for _ in range(4):
            x = client.submit(_make, size, workers=[a], pure=False)
            x.result()
            started = time.perf_counter()
            got = client.submit(_size, x, workers=[b], pure=False).result()
            best = min(best, time.perf_counter() - started)
            del x
    assert got == (size, "cupy")
    report = capfd.readouterr()
    text = report.out + report.err
    assert "cuda_ipc" in text, text[-4000:]
    assert size / best > 60e9, f"4 GiB took {best:.4f} s ({size / best / 1e9:.1f} GB/s): host-staged?"
