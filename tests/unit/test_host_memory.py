"""Host memory per GPU worker (issue 15 item 3): a share per GPU worker, not per core."""

from __future__ import annotations

import logging
import os

import pytest
from distributed.worker_memory import parse_memory_limit
from hypothesis import given, strategies as st

from hpcgpu.system.workers import scheduler_workers
from hpcgpu import LocalGPUCluster
from hpcgpu.worker.hostmemory import HEADROOM, gpu_workers_on_host, host_memory_limit

GiB = 2**30
LOG = logging.getLogger(__name__)


def test_dask_auto_on_the_8xh200_node_is_a_share_per_core_and_ours_per_gpu(monkeypatch):
    monkeypatch.setattr("distributed.system.MEMORY_LIMIT", 560 * GiB)
    monkeypatch.setattr("distributed.worker_memory.system.MEMORY_LIMIT", 560 * GiB)
    dask_share = parse_memory_limit("auto", 1, total_cores=128, logger=LOG)
    assert dask_share / GiB == pytest.approx(4.375)  # what the nannies restarted workers at
    ours = host_memory_limit("auto", 8)
    assert ours / GiB == pytest.approx(560 * (1 - HEADROOM) / 8)
    assert parse_memory_limit(ours, 1, total_cores=128, logger=LOG) == ours  # Dask keeps a number as is


@given(total=st.integers(1 * GiB, 4096 * GiB), workers=st.integers(1, 16))
def test_the_shares_fit_in_the_host_with_headroom(total, workers):
    share = host_memory_limit("auto", workers, total=total)
    assert share * workers <= total * (1 - HEADROOM)
    assert share * workers > total * (1 - HEADROOM) - workers


@pytest.mark.parametrize("given_limit", ["16GiB", 0.5, 0, None, "auto"])
def test_explicit_limits_and_cpu_mode_are_dasks(given_limit):
    assert host_memory_limit(given_limit, 0, total=64 * GiB) == given_limit
    if given_limit != "auto":
        assert host_memory_limit(given_limit, 4, total=64 * GiB) == given_limit


def test_gpu_workers_on_host_from_launchers():
    assert gpu_workers_on_host({"SLURM_NTASKS_PER_NODE": "4(x2)"}) == 4
    assert gpu_workers_on_host({"PALS_LOCAL_SIZE": "8"}) == 8
    assert gpu_workers_on_host({"SLURM_NTASKS_PER_NODE": "", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}) == 2
    assert gpu_workers_on_host({}, default=3) == 3


def test_local_gpu_cluster_gives_each_gpu_worker_its_share():
    """As dask-cuda's LocalCUDACluster: the host's memory divided by the GPU workers (batch
    workers keep HEADROOM for the scheduler and launcher that share their node)."""
    from distributed import Client
    from distributed.system import MEMORY_LIMIT

    # two "GPUs" by index: the workers start in CPU mode here, with the GPU workers' host share
    with LocalGPUCluster(n_workers=2, gpus=["0", "1"], dashboard_address=None) as cluster, \
            Client(cluster) as client:
        client.wait_for_workers(2, timeout=120)
        limits = [w["memory_limit"] for w in scheduler_workers(client).values()]
    assert limits == [int(MEMORY_LIMIT / 2)] * 2
    with LocalGPUCluster(n_workers=1, gpus=[], dashboard_address=None) as cpu, Client(cpu) as client:
        client.wait_for_workers(1, timeout=120)
        limits = [w["memory_limit"] for w in scheduler_workers(client).values()]
    assert limits == [parse_memory_limit("auto", 1, logger=LOG)]  # CPU mode: Dask's own rule


@pytest.mark.gpu
def test_svd_on_all_gpus_restarts_no_worker_and_each_gets_a_host_share():
    """Issue 15: on 8 x H200 (560 GiB, 128 cores) the svd restarted workers at 4.3 GiB each."""
    import dask.array as da
    from distributed import Client
    from distributed.system import MEMORY_LIMIT

    import hpcgpu.array as ha
    from hpcgpu.cluster.local.cluster import visible_gpus

    n = len(visible_gpus())
    assert n >= 1
    with LocalGPUCluster(dashboard_address=None) as cluster, Client(cluster) as client:
        client.wait_for_workers(n, timeout=180)
        pids_before = client.run(os.getpid)
        x = ha.random.random((100000, 1000), chunks=(1000, 1000))
        u, s, v = da.linalg.svd(x)
        assert float(s[0].compute()) > 0
        u, s, v = da.linalg.svd(ha.random.random((300000, 1000), chunks=(1000, 1000)))
        s.compute()
        info = scheduler_workers(client).values()
        limits = [w["memory_limit"] for w in info]
        assert len(limits) == n
        assert all(lim == pytest.approx(MEMORY_LIMIT / n, rel=0.01) for lim in limits)  # as dask-cuda
        # no nanny restarted a worker: the same addresses with the same processes
        assert client.run(os.getpid) == pids_before
