"""Several pools in one cluster on the real local Grid Engine: a GPU pool and a CPU pool
(dask-jobqueue's SGE job, its slots asked for with a parallel environment) in all.q."""

from __future__ import annotations

import dask
import pytest
from distributed import get_worker

from cluster_helpers import FAST, sge_alive
from conftest import wait_for
from hpcgpu import SGECluster
from hpcgpu.system.workers import scheduler_workers

pytestmark = pytest.mark.sge

# A lambda travels by value: the workers cannot import this module.
where = lambda _x=None: str(get_worker().name)  # noqa: E731


def test_sge_gpu_and_cpu_pools_place_annotated_tasks_and_retire_separately(sge, clusters):
    cluster = clusters(SGECluster, **FAST, gpus_per_node=1, pools={"cpu": dict(
        gpus_per_node=0, cores_per_node=2, memory_per_node="2GB",
        job_extra_directives=["-pe smp 2"])})
    assert "#$ -pe smp 2" in cluster.job_script(pool="cpu")
    assert "--resources CPU=2,pool-cpu=1" in cluster.job_script(pool="cpu")
    cluster.scale(gpus=1)
    cluster.scale(jobs=1, pool="cpu")
    cluster.wait_for_workers(2, timeout=180)
    ids = {job.pool: job.job_id for job in cluster.jobs}
    assert sorted(ids) == ["cpu", "default"]
    with cluster.get_client() as client:
        names = {w["name"]: w["resources"] for w in scheduler_workers(client).values()}
        gpu = {n for n, r in names.items() if r.get("GPU") == 1 and r.get("pool-default") == 1}
        cpu = {n for n, r in names.items() if r.get("CPU") == 2 and r.get("pool-cpu") == 1}
        assert len(gpu) == 1 and len(cpu) == 1, names
        with dask.annotate(resources={"GPU": 1}):
            on_gpu = [dask.delayed(where)(i) for i in range(6)]
        with dask.annotate(resources={"CPU": 1}):
            on_cpu = [dask.delayed(where)(i) for i in range(6)]
        gpu_ran, cpu_ran = client.compute([on_gpu, on_cpu], sync=True)
        assert set(gpu_ran) == gpu and set(cpu_ran) == cpu
        cluster.scale(jobs=0, pool="cpu")
        wait_for(lambda: not sge_alive(ids["cpu"]), 60, what="the CPU pool's job to end")
        wait_for(lambda: {w["name"] for w in scheduler_workers(client).values()} == gpu,
                 60, what="the GPU pool's worker alone")
        assert sge_alive(ids["default"])
        assert client.submit(lambda: 6 * 7, resources={"GPU": 1}).result() == 42
