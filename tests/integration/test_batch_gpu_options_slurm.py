"""dask-cuda's worker keywords given to SLURMCluster, and dask cuda worker's flags given to
``hpcgpu run``, reach the workers of a real SLURM job (the fake GPUs run the CPU path: the
options arrive, nothing crashes)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from distributed import Client

from batchtools import job_output, sbatch_wrap, slurm_state
from cluster_helpers import FAST
from conftest import wait_for
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


ACTIVE = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING")
SCRIPT = '''
import json, sys
from distributed import Client

def view():
    from hpcgpu.jobspec.gpuoptions import GPUWorkerOptions
    o = GPUWorkerOptions.from_env()
    return [o.rmm_pool_size, o.device_memory_limit, list(o.pre_import or ()), "colorsys" in sys.modules]

with Client() as client:
    json.dump(list(client.run(view).values()), open(sys.argv[1], "w"))
'''


def test_hpcgpu_run_hands_dask_cuda_flags_to_its_workers(slurm, tmp_path):
    (tmp_path / "view.py").write_text(SCRIPT)
    command = (f"{sys.executable} -m hpcgpu run --dashboard-address '' --timeout 120 "
               "--rmm-pool-size 1GB --device-memory-limit none --pre-import colorsys "
               f"{tmp_path / 'view.py'} {tmp_path / 'view.json'}")
    job_id = sbatch_wrap(tmp_path, ["-N1", "--ntasks-per-node=1", "--gpus-per-node=1"], command,
                         name="hpcgpu-gpuopts-run")
    try:  # ended: finished, or forgotten by a slurmctld restarted meanwhile (other tests)
        wait_for(lambda: slurm_state(job_id)[0] not in ACTIVE, 180, 0.2, what=f"job {job_id}")
    finally:
        subprocess.run(["scancel", job_id], capture_output=True, timeout=60)
    out = job_output(tmp_path, f"{job_id}.*")
    assert "view.py exited with code 0" in out, out[-3000:]
    assert json.loads((tmp_path / "view.json").read_text()) == [["1GB", None, ["colorsys"], True]]
