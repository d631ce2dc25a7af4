"""Cluster mode over UCX on the real local SLURM (UCX over TCP on loopback, no GPU):
scheduler, workers and client configured from one ``NetworkSettings``; and
``scheduler_in_job`` (scheduler in the first job, the client in over TLS)."""

from __future__ import annotations

import os
import sys
import time

import cloudpickle
import dask
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


def test_slurm_cluster_over_ucx_runs_its_scheduler_apart(slurm, tmp_path):
    """The scheduler in a process of its own on this host (its UCX there), the client in
    over TLS: this process speaks no UCX (distributed-ucxx can corrupt the heap of one that
    holds a UCX scheduler and a client)."""
    with dask.config.set({"distributed.scheduler.allowed-failures": 7}), \
            SLURMCluster(protocol="ucx", interface="lo", gpus_per_node=2,
                         log_directory=str(tmp_path / "logs"), **FAST) as cluster:
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
        assert cluster.scheduler.contact_address.startswith("ucx://127.0.0.1:")
        child = cluster.scheduler.child
        script = cluster.job_script()
        assert "export DASK_DISTRIBUTED_UCXX__CREATE_CUDA_CONTEXT=True" in script
        assert "--protocol ucx --interface lo" in script
        _check_compute_over_ucx(cluster, gpus=4)
        with Client(cluster) as client:
            assert client.run_on_scheduler(os.getpid) == child.pid != os.getpid()
            assert client.scheduler_info()["services"].get("dashboard")  # as in-process
            # this process's Dask config, as an in-process scheduler would have read it
            assert client.run_on_scheduler(lambda dask_scheduler: dask_scheduler.allowed_failures) == 7
    assert not child.running()  # it ended with the cluster


def test_another_scheduler_class_is_refused_naming_the_field(tmp_path):
    from distributed import Scheduler

    class Mine(Scheduler):
        pass

    with pytest.raises(RuntimeError, match="scheduler_cls=.*Mine.* with protocol='ucx': a UCX cluster's scheduler "
                                           "runs in a process of its own"):
        SLURMCluster(protocol="ucx", interface="lo", gpus_per_node=1, log_directory=str(tmp_path),
                     scheduler_cls=Mine, **FAST)


def test_a_scheduler_process_that_cannot_start_says_why_at_once(tmp_path):
    start = time.monotonic()
    with pytest.raises(RuntimeError) as caught:
        SLURMCluster(protocol="ucx", interface="lo", gpus_per_node=1, log_directory=str(tmp_path),
                     **{**FAST, "scheduler_options": {"no_such_option": 1}})
    assert time.monotonic() - start < 30
    message = str(caught.value)  # its own error, and what to check
    assert message.startswith("the Dask scheduler did not start: TypeError: ") and "'no_such_option'" in message
    assert "(in the scheduler's own process, which ended)" in message and "scheduler_options=" in message


def test_scheduler_in_first_job_client_over_tls(slurm, tmp_path):
    with SLURMCluster(protocol="ucx", interface="lo", gpus_per_node=2, scheduler_in_job=True,
                      log_directory=str(tmp_path / "logs"), **FAST) as cluster:
        assert cluster.scheduler_address.startswith("tls://127.0.0.1:")
        assert cluster.scheduler.contact_address.startswith("ucx://127.0.0.1:")
        assert cluster.scheduler.job.job_id
        _check_compute_over_ucx(cluster, gpus=4)
        # The first job holds the scheduler: one more job gives the other 2 GPUs.
        assert len(cluster.worker_spec) == 1
