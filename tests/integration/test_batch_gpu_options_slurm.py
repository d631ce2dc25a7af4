"""dask-cuda's worker keywords given to SLURMCluster reach the workers of a real SLURM job
(the fake GPUs run the CPU path: the options arrive, nothing crashes)."""

from __future__ import annotations

import pytest
from distributed import Client

from cluster_helpers import FAST
from hpcgpu import SLURMCluster

pytestmark = pytest.mark.slurm


def test_a_slurm_worker_receives_the_dask_cuda_keywords(slurm, clusters):
    cluster = clusters(SLURMCluster, **FAST, gpus_per_node=1, device_memory_limit="512MB",
                       rmm_pool_size="1GB", rmm_maximum_pool_size="2GB", pre_import="colorsys",
                       cpu_affinity=False)
    assert "--rmm-pool-size 1GB" in cluster.job_script()
    def worker_view(dask_worker) -> dict:  # defined here: sent by value, not by module name
        import sys

        from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions

        return {"options": GPUWorkerOptions.from_env(), "setup": dask_worker.hpcgpu_setup,
                "pre_imported": "colorsys" in sys.modules}

    cluster.scale(jobs=1)
    cluster.wait_for_workers(gpus=1, timeout=120)
    with Client(cluster) as client:
        (view,) = client.run(worker_view).values()
    assert view["options"] == cluster.gpu_options
    assert (view["options"].rmm_pool_size, view["options"].device_memory_limit) == ("1GB", "512MB")
    assert view["pre_imported"]
    # no CUDA on the fake GPUs: the CPU path, no allocator, no device spilling, no pinning
    assert view["setup"] == {"allocator": None, "device_memory_limit": None, "cpu_affinity": None}
