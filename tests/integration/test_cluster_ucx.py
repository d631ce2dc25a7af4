"""Cluster mode over UCX on the real local SLURM (UCX over TCP on loopback, no GPU):
scheduler, workers and client configured from one ``NetworkSettings``; and
``scheduler_in_job`` (scheduler in the first job, the client in over TLS)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import cloudpickle
import dask.array as da
import pytest
from distributed import Client

from cluster_helpers import FAST
from hpcgpu import SLURMCluster
from ucx_marks import needs_ucx

cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers cannot import tests
pytestmark = [pytest.mark.slurm, needs_ucx]


def _worker_view(dask_worker):
    return dask_worker.address, dask_worker.state.transfer_incoming_count_total


def _check_compute_over_ucx(cluster, gpus: int) -> None:
    cluster.scale(gpus=gpus)
    cluster.wait_for_workers(gpus=gpus, timeout=300)  # the shared queue may be full
    with Client(cluster) as client:
        x = da.arange(400 * 400, chunks=100 * 400).reshape(400, 400).rechunk(100).astype("f8")
        assert float(client.compute((x + x.T).sum()).result(timeout=60)) == 2 * sum(range(400 * 400))
        views = client.run(_worker_view)
        assert len(views) == gpus
        assert all(address.startswith("ucx://127.0.0.1:") for address, _ in views.values())
        # x + x.T needs other workers' chunks: UCX carried them between workers.
        assert sum(incoming for _, incoming in views.values()) > 0


def _isolated(body: str, tmp_path) -> None:
    """Run ``body(tmp_path)`` in a fresh Python: UCX is initialised once per process, and
    ucxx (0.52) can crash (SIGSEGV in its progress thread) when a later UCX scheduler in the
    same process runs on a new event loop; other UCX tests share this pytest process."""
    code = f"import sys; sys.path[:0] = [{str(Path(__file__).parent)!r}, {str(Path(__file__).parents[1])!r}]; import test_cluster_ucx as t; t.{body}({str(tmp_path)!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=480)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]


def test_slurm_cluster_over_ucx(slurm, tmp_path):
    _isolated("_cluster_over_ucx", tmp_path)


def _cluster_over_ucx(tmp_path: str) -> None:
    tmp_path = Path(tmp_path)
    with SLURMCluster(protocol="ucx", interface="lo", gpus_per_node=2,
                      log_directory=str(tmp_path / "logs"), **FAST) as cluster:
        assert cluster.scheduler_address.startswith("ucx://127.0.0.1:")
        script = cluster.job_script()
        assert "export DASK_DISTRIBUTED_UCXX__CREATE_CUDA_CONTEXT=True" in script
        assert "--protocol ucx --interface lo" in script
        _check_compute_over_ucx(cluster, gpus=4)


def test_scheduler_in_first_job_client_over_tls(slurm, tmp_path):
    with SLURMCluster(protocol="ucx", interface="lo", gpus_per_node=2, scheduler_in_job=True,
                      log_directory=str(tmp_path / "logs"), **FAST) as cluster:
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
        assert cluster.scheduler.contact_address.startswith("ucx://127.0.0.1:")
        assert cluster.scheduler.job.job_id
        _check_compute_over_ucx(cluster, gpus=4)
        # The first job holds the scheduler: one more job gives the other 2 GPUs.
        assert len(cluster.worker_spec) == 1
