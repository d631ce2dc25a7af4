"""LocalGPUCluster on this machine (no GPU: the CPU fallback) and, marked gpu, on GPUs."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest
from distributed import Client

from hpcgpu import LocalGPUCluster
import hpcgpu.array as ha


def test_cpu_fallback_runs_the_same_worker_plumbing():
    with LocalGPUCluster(n_workers=2, gpus=[], dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(2, timeout=60)
        info = client.run_on_scheduler(
            lambda dask_scheduler: sorted((ws.name, ws.extra["hpcgpu"]["local_rank"], ws.extra["hpcgpu"]["gpu_present"],
                                           ws.extra["hpcgpu"]["allocator"]) for ws in dask_scheduler.workers.values()))
        host = os.uname().nodename
        assert [i[1:] for i in info] == [(0, False, None), (1, False, None)]
        assert {i[0] for i in info} == {f"{host}-0-0", f"{host}-0-1"}
        assert set(client.run(lambda dask_worker: type(dask_worker).__name__).values()) == {"GPUWorker"}
        x = ha.random.normal(10, 1, size=(400, 400), chunks=(100, 100), seed=0)
        assert client.compute(x.sum()).result() == pytest.approx(x.sum().compute(scheduler="sync"))
        cluster.scale(3)
        client.wait_for_workers(3, timeout=60)


def test_workers_keep_start_up_objects_out_of_full_collections_and_the_user_process_is_untouched():
    import gc

    before = gc.get_freeze_count()
    with LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(1, timeout=60)
        (frozen,) = client.run(lambda: __import__("gc").get_freeze_count()).values()
        assert frozen > 10_000  # modules, Dask, distributed: about 80,000 here without a GPU
    assert gc.get_freeze_count() == before


def test_bad_options_fail_before_anything_starts():
    with pytest.raises(ValueError, match="device_memory_limit='x'"):
        LocalGPUCluster(device_memory_limit="x", gpus=[])
    with pytest.raises(ValueError, match="n_workers=3 but only 2 GPUs"):
        LocalGPUCluster(n_workers=3, gpus=["0", "1"])


@pytest.mark.gpu
def test_one_pinned_worker_per_gpu_with_rmm_and_affinity():
    """hpcgpu's default (no rmm_* keyword): an RMM pool with CuPy's pool drawing from it."""
    import cupy

    n = cupy.cuda.runtime.getDeviceCount()
    with LocalGPUCluster(dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(n, timeout=120)

        def probe():
            import cupy, rmm

            a = cupy.ones(1000)
            pci = cupy.cuda.Device(0).pci_bus_id  # domain:bus:device; bus alone repeats in VMs
            pool = cupy.cuda.get_allocator().__self__  # CuPy's pool over RMM's
            rmm_pool = rmm.mr.get_current_device_resource().get_upstream()
            return (os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0], pci,
                    pool.used_bytes() >= a.nbytes and rmm_pool.get_upstream() is not None,
                    type(rmm_pool).__name__, sorted(os.sched_getaffinity(0)), float(a.sum()))

        seen = client.run(probe)
        firsts = sorted(v[0] for v in seen.values())
        assert len(set(firsts)) == n and len({v[1] for v in seen.values()}) == n  # distinct GPUs
        assert all(v[2] for v in seen.values()), seen  # CuPy's pool allocates from RMM's
        assert all(v[3] == "PoolMemoryResource" for v in seen.values()), seen
        assert all(set(v[4]) <= os.sched_getaffinity(0) and v[4] for v in seen.values())
        meta = client.run_on_scheduler(lambda dask_scheduler: [ws.extra["hpcgpu"] for ws in dask_scheduler.workers.values()])
        assert all(m["gpu_present"] and m["allocator"].startswith("rmm-pool") for m in meta)


@pytest.mark.gpu
def test_an_rmm_keyword_has_dask_cudas_meaning():
    """rmm_pool_size given: dask-cuda's RMMSetup makes that pool, CuPy keeps its allocator,
    and dask-cuda's cluster configuration shows the plugin."""
    pytest.importorskip("dask_cuda")
    from dask_cuda.utils import get_cluster_configuration

    with LocalGPUCluster(n_workers=1, dashboard_address=None, rmm_pool_size="2GB",
                         rmm_maximum_pool_size="3GB", pre_import="json") as cluster, Client(cluster) as client:
        def probe():
            import cupy, rmm

            return (type(rmm.mr.get_current_device_resource()).__name__,
                    type(getattr(cupy.cuda.get_allocator(), "__self__", None)).__name__)

        # as on dask-cuda's own workers: where cuDF is installed, its import during the
        # worker's start sets CuPy's allocator to RMM's plain one
        cupy_allocator = "NoneType" if importlib.util.find_spec("cudf") else "MemoryPool"
        assert list(client.run(probe).values()) == [("PoolMemoryResource", cupy_allocator)]
        config = get_cluster_configuration(client)
        assert (config["[plugin] RMMSetup"]["initial_pool_size"], config["[plugin] RMMSetup"]["maximum_pool_size"],
                config["[plugin] PreImport"]["libraries"]) == (2000000000, 3000000000, ["json"])


@pytest.mark.gpu
def test_computation_larger_than_the_device_memory_limit_spills_and_completes():
    pytest.importorskip("dask_cuda")
    with LocalGPUCluster(n_workers=1, dashboard_address=None, rmm_pool_size="none",
                         device_memory_limit="1GB", memory_limit="32GB") as cluster, Client(cluster) as client:
        x = ha.random.random((30_000, 20_000), chunks=(2_500, 20_000), seed=1, backend="gpu")  # 4.8 GB
        x = client.persist(x)
        total = client.compute(x.sum()).result()
        assert abs(float(total) / x.size - 0.5) < 1e-3

        def spilled(dask_worker):
            return len(dask_worker.data.host), len(dask_worker.data.device), type(dask_worker.data).__name__

        host, device, kind = list(client.run(spilled).values())[0]
        assert kind == "DeviceHostFile" and host > 0 and device <= 3, (host, device, kind)

        def allocator():  # rmm_pool_size="none": CuPy's own pool, not RMM's pool-less cudaMalloc
            import cupy

            return type(getattr(cupy.cuda.get_allocator(), "__self__", None)).__name__

        assert set(client.run(allocator).values()) == {"MemoryPool"}


@pytest.mark.gpu
def test_cupy_keeps_its_free_blocks_until_rmm_needs_them():
    """CuPy's pool over RMM's: what CuPy frees stays in CuPy's pool, and an RMM allocation
    (as cuDF or UCX makes) that finds the GPU full gets those blocks back."""
    code = """
import cupy, rmm
from hpcgpu.worker.gpusetup import setup_rmm
print(setup_rmm("2GiB", cupy.cuda.Device().mem_info[1]))
free = cupy.cuda.Device().mem_info[0]
a = cupy.empty(int(free * 0.8), dtype=cupy.uint8)
del a
pool = cupy.cuda.get_allocator().__self__
print(pool.free_bytes() >= free * 0.8)
buffer = rmm.DeviceBuffer(size=int(free * 0.5))  # the GPU is full: only CuPy's free blocks fit it
print(pool.free_bytes() == 0, buffer.size == int(free * 0.5))
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split("\n")[:3] == ["rmm-pool (2147483648 bytes)", "True", "True True"], done.stdout

