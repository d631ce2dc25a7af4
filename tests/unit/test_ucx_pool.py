"""UCX's RMM pool and the worker's (issue 15 item 2): UCX receives into the worker's pool."""

from __future__ import annotations

import subprocess
import sys

import dask
import pytest

from hpcgpu.worker.ucxpool import UCX_POOL_KEYS, let_ucx_use_the_worker_pool, ucx_pool_size


@pytest.mark.parametrize("key", UCX_POOL_KEYS)
def test_a_worker_with_an_rmm_pool_drops_ucxs_second_pool(key):
    with dask.config.set({key: "16GiB"}):
        assert ucx_pool_size() == "16GiB"
        assert let_ucx_use_the_worker_pool("rmm-pool (1000 bytes)") == "16GiB"
        assert ucx_pool_size() is None


def test_without_a_worker_pool_ucx_keeps_its_own():
    with dask.config.set({"distributed-ucxx.rmm.pool-size": "1GiB"}):
        assert let_ucx_use_the_worker_pool(None) is None
        assert let_ucx_use_the_worker_pool("cupy-pool (rmm_pool_size=none)") is None
        assert ucx_pool_size() == "1GiB"


def test_the_environment_variable_of_the_benchmark_is_the_key_we_drop():
    code = "import distributed_ucxx, dask; print(dask.config.get('distributed-ucxx.rmm.pool-size'))"
    pytest.importorskip("distributed_ucxx")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={"DASK_DISTRIBUTED_UCXX__RMM__POOL_SIZE": "16GiB", "PATH": "/usr/bin:/bin"})
    assert out.stdout.strip() == "16GiB", out.stderr


@pytest.mark.gpu
def test_ucx_pool_setting_with_auto_worker_pools_starts_every_worker(monkeypatch):
    """On 4 x H200 every worker died with 'Maximum pool size exceeded (failed to allocate 16 GiB)'."""
    pytest.importorskip("distributed_ucxx", reason="protocol='ucx' needs distributed-ucxx (the ucx extra)")
    # without dask-cuda the workers keep CuPy's pool (setup_rmm: "cupy-pool (dask-cuda not
    # installed ...)") and UCX its own: no RMM pool to receive into
    pytest.importorskip("dask_cuda", reason="the workers' RMM pool comes with dask-cuda (the cuda extras)")
    import cupy
    from distributed import Client

    from hpcgpu import LocalGPUCluster

    monkeypatch.setenv("DASK_DISTRIBUTED_UCXX__RMM__POOL_SIZE", "16GiB")
    n = cupy.cuda.runtime.getDeviceCount()
    with dask.config.set({"distributed-ucxx.rmm.pool-size": "16GiB"}), \
            LocalGPUCluster(protocol="ucx", dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(n, timeout=60)
        meta = client.run_on_scheduler(lambda dask_scheduler: [
            ws.extra["hpcgpu"] for ws in dask_scheduler.workers.values()])
        assert all(m["allocator"].startswith("rmm-pool") and m["ucx_pool_dropped"] == "16GiB" for m in meta), meta
        import hpcgpu.array as ha

        x = ha.random.random((20000, 20000), chunks=(5000, 5000))
        assert float((x + x.T).sum().compute()) > 0
